"""Reading a JSON request body with its cost bounded before anything is built: depth and member count.

Owns: `read_object(raw, ...)`: the body decoded as JSON's own loader decodes it (UTF-8/16/32), then one scan
of its structure that stops at the first bound it passes (nesting deeper than `max_depth`, more than
`max_members` keys and array elements in all), then `json.loads`. The scan visits tokens, not characters: a
regex finds the next structural character and each string is skipped by the json module's own C scanner,
so refusing a body of a million keys or a hundred thousand brackets costs O(limit) steps, never O(body).
A refusal is a 400 naming the top-level member it happened in (for too many top-level keys: the first one
the caller does not know, as the schema would name it; a lone surrogate in the name as its escape, so the
answer can be encoded); its message calls the document `whole` ("body"; a WebSocket's messages say
"message"). A top-level member the caller names in `lists` (a batch's `items`) may hold at most that many
elements: counted in the same scan, refused naming it (code `too_many_items`) at the first element over.
Then every key, at every depth, must be encodable as UTF-8 (`unencodable_key`): a lone surrogate in a field's
name is refused naming its path with the key as its escape (`voice.k\\ud800`, `context[0].k\\ud800`); the
elements of a `lists` member are left to the caller, which checks each apart (a batch item fails alone).
Must not know: FastAPI, the speech fields (the caller passes the names it knows), the runtime.
"""

from __future__ import annotations

import json
import re
from json.decoder import scanstring  # type: ignore[attr-defined]
from typing import Any, Collection, Mapping

from v2.server.errors import ApiError

MAX_DEPTH = 16      # a speech body is 2 deep (`voice: {"id": ...}`)
MAX_MEMBERS = 256   # keys and array elements in all; a speech body has at most ~25
_NEXT = re.compile(r'[\[\]{}:,"]')  # the only characters with meaning outside a string
_KEY_CHARS = 200                    # longer keys are cut in the message


def read_object(raw: bytes, *, known: Collection[str] = (), max_depth: int = MAX_DEPTH,
                max_members: int = MAX_MEMBERS, lists: Mapping[str, int] | None = None) -> dict[str, Any]:
    """The JSON object in `raw`, or an ApiError 400 (`invalid_json`; `too_complex` or `too_many_items` naming
    the member; `invalid_value` naming a key that holds a lone surrogate, outside the elements of `lists`)."""
    try:
        text = raw.decode(json.detect_encoding(raw), "surrogatepass")
    except (UnicodeDecodeError, LookupError) as e:
        raise ApiError(400, f"the body is not valid JSON: {e}", code="invalid_json") from None
    check_shape(text, known=known, max_depth=max_depth, max_members=max_members, lists=lists)
    try:
        body = json.loads(text)
    except ValueError as e:
        raise ApiError(400, f"the body is not valid JSON: {e}", code="invalid_json") from None
    if not isinstance(body, dict):
        raise ApiError(400, "the body must be a JSON object", code="invalid_json")
    for name, value in body.items():
        apart = lists is not None and name in lists and isinstance(value, list)  # the caller's, item by item
        refuse_unencodable_key({name: [] if apart else value})
    return body


def check_shape(text: str, *, known: Collection[str] = (), max_depth: int = MAX_DEPTH,
                max_members: int = MAX_MEMBERS, whole: str = "body", lists: Mapping[str, int] | None = None) -> int:
    """Refuse `text` at the first bound it passes; the number of tokens visited otherwise. Depth: arrays and
    objects open at once. Members: every key, and every array element after each array's first (the `,`
    of arrays and the `:` of objects). Tokens (strings, brackets, separators): a valid document within both
    bounds has fewer than `token_limit(...)` (each member brings a few, each first element a chain of at
    most `max_depth` arrays), so one with more is invalid or over a bound: refused too. So the scan visits
    O(max_members * max_depth) tokens at most, however long the text. A top-level member named in `lists`
    whose value is an array: more elements than its bound are refused naming it (`too_many_items`). Other
    malformed JSON is left for `json.loads` to describe: the scan stops where it stops making sense."""
    open_: list[str] = []              # the containers the scan is in (at most max_depth)
    members = tokens = pos = 0
    elements = 0                       # the separators of the array the current top-level member holds
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
                last = _escaped(value)
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
                top, elements = last, 0
                if first_unknown is None and top not in known:
                    first_unknown = top
            elif c == "," and len(open_) == 2 and lists and top is not None and top in lists:  # its array's
                elements += 1
                if elements >= lists[top]:  # one more element than separators
                    raise ApiError(400, f"{top}: more than {lists[top]} items (refused before parsing)",
                                   param=top, code="too_many_items")
            if members > max_members:  # passed by the top-level keys: blame the one the schema would
                top_level = c == ":" and len(open_) == 1
                raise _refusal(first_unknown or top if top_level else top,
                               f"the {whole} has more than {max_members} keys and array elements", whole)
    return tokens


def token_limit(max_depth: int, max_members: int) -> int:
    """More tokens than a valid document within both bounds can have: per member (a key or an element) its
    separator, at most two strings, and a chain of at most `max_depth` first-element containers."""
    return (max_members + 1) * (2 * max_depth + 4) + 2 * max_depth + 8


def unencodable_key(value: Any, path: str = "") -> str | None:
    """The path of the first key in `value` (a parsed JSON value, at any depth) that UTF-8 cannot encode (a
    lone surrogate, which JSON's `\\ud800` escape can bring), the key written as its escape: `k\\ud800`,
    `voice.k\\ud800`, `context[1].k\\ud800`; None when every key can be. ASCII keys are not copied."""
    if isinstance(value, dict):
        for key, item in value.items():
            if isinstance(key, str) and not key.isascii() and not _encodable(key):
                return _joined(path, _escaped(key))
            if isinstance(item, (dict, list)) and (found := unencodable_key(item, _joined(path, _escaped(key)))):
                return found
    elif isinstance(value, list):
        for i, item in enumerate(value):
            if isinstance(item, (dict, list)) and (found := unencodable_key(item, f"{path}[{i}]")):
                return found
    return None


def refuse_unencodable_key(value: Any) -> None:
    """An ApiError 400 naming the path of the first key in `value` that UTF-8 cannot encode (`unencodable_key`)."""
    path = unencodable_key(value)
    if path is not None:
        raise ApiError(400, f"{path}: not a field (its name holds a lone surrogate, which cannot be encoded as "
                       "UTF-8; shown here as its escape)", param=path, code="invalid_value")


def _escaped(text: str) -> str:
    """`text` (its first `_KEY_CHARS` characters) as UTF-8 can carry it: a lone surrogate as its escape."""
    text = text[:_KEY_CHARS]
    return text if text.isascii() else text.encode("utf-8", "backslashreplace").decode("utf-8")


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _joined(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _refusal(param: str | None, what: str, whole: str) -> ApiError:
    return ApiError(400, f"{param if param is not None else whole}: {what} (refused before parsing)", param=param,
                    code="too_complex")
