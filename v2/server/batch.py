"""`POST /v1/audio/speech/batch`: many speech requests in one body, for offline work (datasets, audiobooks,
prompt sets), answered together once every item has ended.

Owns: the batch body (the fields of `POST /v1/audio/speech` as request-level defaults, all optional, `input`
too; `items`: a list of objects with the same fields, each overriding the defaults, plus an optional `id`
echoed in its result), bounding what a batch may cost before any work starts (the body's bytes by the
gate's `max_body_bytes`; its JSON members by jsonbody.py with a budget per item; at most `max_batch_items`
items, counted as the body is scanned and refused naming `items`; each item's `input` at most
`max_input_chars`, so a batch says at most items x chars; an item that is not an object is no request: the
batch is refused naming it, `items[i]`; a request-level default every item was refused for, which no item
overrides, is the batch's 400 naming it), planning and submitting every item before waiting on any (the engine
batches them; a bad item, a refusal or an overload is that item's error, in OpenAI's error shape naming its
field as /v1/audio/speech would, a key with a lone surrogate by its path in the item, and the others run),
gathering the results in the order given while watching the socket (a client that leaves cancels every
item at once), and the answer: JSON, `{"id", "object": "speech.batch", "results": [...], "total",
"succeeded", "failed"}`, each result `{"index", "id", "status": "success" | "error", ...}` with its audio
base64 in the item's `response_format` (`audio_data`, `media_type`, rate, channels, finish reason, audio
seconds, frames; `words`, `[{word, start, end}]`, for an item that asked `timestamps: "word"`) or its `error`.
A batch answers whole files: `stream: true` and `stream_format` are an
item's error. vllm-omni's field names (`results`, `index`, `status`, `audio_data`, `media_type`, `total`,
`succeeded`, `failed`); the error is OpenAI's object, not a string.
Must not know: the engine's internals, how formats are encoded (audio.py), any family or its fields.
"""

from __future__ import annotations

import asyncio
import base64
import uuid
from dataclasses import dataclass
from typing import Any

import anyio
from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse
from starlette.types import Receive

from v2.errors import did_you_mean
from v2.params import FamilyParams
from v2.server import audio
from v2.server.errors import ApiError
from v2.server.jsonbody import refuse_unencodable_key
from v2.server.schema import SpeechBody, family_params, parse_body, plan
from v2.server.speech import read_json, submit_plan
from v2.server.state import ServerState, server_state
from v2.server.streaming import ending_error
from v2.server.timestamps import has_aligner, plan_words, word_json

router = APIRouter()
PATH = "/v1/audio/speech/batch"
MEMBERS_PER_ITEM = 48          # JSON members an item may bring (its fields, a context's turns and their fields)
WHOLE_ONLY = ("stream", "stream_format")  # a batch answers whole files


@dataclass
class _Item:
    """One item of a batch: its place, the `id` it gave, and what became of it so far."""

    index: int
    id: str | None
    handle: Any = None              # submitted
    error: ApiError | None = None   # refused before or after submitting
    spec: Any = None                # its output spec (format, rate, channels)
    result: Any = None
    words: bool = False             # it asked for word timestamps: its result carries them


def _body(st: ServerState, raw: bytes, content_type: str) -> tuple[dict[str, Any], list[Any]]:
    """The defaults and the items, refused whole (400 naming the field) where the batch itself is wrong."""
    limit = st.config.max_batch_items
    over = ApiError(400, f"items: more than {limit} items; this server takes at most {limit} a batch "
                    "(--max-batch-items): split the batch", param="items", code="too_many_items")
    try:  # the items counted as the body is scanned, before it is parsed
        body = read_json(raw, content_type, known=(*SpeechBody.model_fields, "items"),
                         max_members=MEMBERS_PER_ITEM * (limit + 1), lists={"items": limit})
    except ApiError as e:
        raise over if e.code == "too_many_items" and e.param == "items" else e from None
    items = body.pop("items", None)
    if not isinstance(items, list) or not items:
        raise ApiError(400, "items: give a non-empty list of speech requests (objects with the fields of "
                       "/v1/audio/speech, each overriding the request-level ones)", param="items",
                       code="invalid_value")
    if len(items) > limit:
        raise over
    for i, item in enumerate(items):  # not a request at all: the batch is malformed (its schema says objects)
        if not isinstance(item, dict):
            raise ApiError(400, f"items[{i}]: must be an object of speech fields (those of /v1/audio/speech), "
                           f"not {_json_type(item)}", param=f"items[{i}]", code="invalid_value")
    for name in body:
        if name not in SpeechBody.model_fields:
            name = _encodable(name)  # echoed: a lone surrogate in it would make the answer unencodable
            hint = did_you_mean(name, (*SpeechBody.model_fields, "items"))
            raise ApiError(400, f"{name}: not a field of a batch (the fields of /v1/audio/speech and items"
                           f"{'; ' + hint if hint else ''})", param=name, code="invalid_value")
    for name in WHOLE_ONLY:
        if _given(body.get(name)):
            raise ApiError(400, f"{name}: a batch answers whole files (omit it)", param=name, code="invalid_value")
    parse_body({"input": "", **body})  # a bad default is every item's: refused once, naming it
    return body, items


def _accept_item(st: ServerState, family: FamilyParams, defaults: dict[str, Any], index: int,
                 given: dict[str, Any]) -> _Item:
    """Check, plan and submit one item: its handle, or its error (never raised: one item fails alone)."""
    item = _Item(index, None)
    try:
        refuse_unencodable_key(given)  # a field's name with a lone surrogate, named by its path in the item
        given = dict(given)
        name = given.pop("id", None)
        if name is not None and not isinstance(name, str):
            raise ApiError(400, "id: must be a string (echoed in the item's result)", param="id", code="invalid_value")
        if name is not None and _encodable(name) != name:
            raise ApiError(400, "id: has a lone surrogate, which cannot be encoded as UTF-8 (it is echoed in the "
                           "item's result)", param="id", code="invalid_value")
        item.id = name
        merged = {**defaults, **given}
        for field in WHOLE_ONLY:
            if _given(merged.get(field)):
                raise ApiError(400, f"{field}: a batch answers whole files (omit it)", param=field,
                               code="invalid_value")
        p = plan(parse_body({**merged, "stream": False}), st.config.limits(), native_rate=st.native_rate,
                 native_channels=st.native_channels, takes=family.takes)
        p = plan_words(p, has_aligner(st.runtime))  # `timestamps`: refused without an aligner
        item.spec, item.words = p.spec, p.params.timestamps is not None
        item.handle = submit_plan(st, family, p)
    except ApiError as e:
        item.error = e
    return item


def _given(value: Any) -> bool:
    """A whole-only field set to anything but null or false (`0`, `""`, `[]` are given: `0 == False` in Python,
    not in the schema)."""
    return value is not None and value is not False


def _json_type(value: Any) -> str:
    """What JSON calls a parsed value's type (a list is an array)."""
    names = {list: "an array", str: "a string", bool: "a boolean", int: "a number", float: "a number"}
    return "null" if value is None else names.get(type(value), type(value).__name__)


def _encodable(text: str) -> str:
    """`text` as UTF-8 can carry it: a lone surrogate (JSON's `\\ud800` escape can bring one) written as its
    escape."""
    return text if text.isascii() else text.encode("utf-8", "backslashreplace").decode("utf-8")


def _accept(st: ServerState, raw: bytes, content_type: str) -> list[_Item]:
    """Every item planned and submitted, in order, before any is waited on (in a worker thread)."""
    defaults, items = _body(st, raw, content_type)
    family = family_params(st.runtime)
    accepted = [_accept_item(st, family, defaults, i, given) for i, given in enumerate(items)]
    refused = _a_default_refused(defaults, items, accepted)
    if refused is not None:  # nothing was submitted: every item was refused before it ran
        raise refused
    return accepted


def _a_default_refused(defaults: dict[str, Any], given: list[Any], accepted: list[_Item]) -> ApiError | None:
    """The batch's own 400 where a request-level default is what every item was refused for (a value its family
    checks only with a whole request, e.g. a temperature out of range): each item failed naming one field that
    came from the defaults, which no item overrides. None where any item ran or another reason stopped one."""
    errors = [item.error for item in accepted]
    if not errors or any(e is None or e.status != 400 for e in errors):
        return None
    params = {e.param for e in errors if e is not None}
    if len(params) != 1:
        return None
    param = params.pop()
    if param is None or param not in defaults or any(param in item for item in given):
        return None
    first = errors[0]
    assert first is not None
    return ApiError(400, f"{first.message} (a request-level default: every item takes it)", param=param,
                    code=first.code)


async def _gather(items: list[_Item], receive: Receive) -> bool:
    """Wait for every submitted item's result; False (each item cancelled) if the client left first."""
    async def one(item: _Item) -> None:
        async for _ in item.handle:
            pass
        item.result = item.handle.result() if item.handle.done else \
            await anyio.to_thread.run_sync(item.handle.result)

    async def left() -> None:
        while (await receive())["type"] != "http.disconnect":
            pass

    work = [asyncio.ensure_future(one(item)) for item in items if item.handle is not None]
    watch: asyncio.Future[Any] = asyncio.ensure_future(left())
    every: asyncio.Future[Any] | None = None
    try:
        if work:
            every = asyncio.ensure_future(asyncio.gather(*work))
            done, _ = await asyncio.wait({every, watch}, return_when=asyncio.FIRST_COMPLETED)
            if every in done:
                every.result()  # an unexpected failure is the gate's 500
            return watch not in done
        return True
    finally:
        watch.cancel()
        if every is not None:  # its items with it; the CancelledError it ends with is read, not logged as lost
            every.cancel()
            every.add_done_callback(lambda f: f.cancelled() or f.exception())
        for task in work:
            task.cancel()
        for item in items:
            if item.handle is not None:
                item.handle.cancel()  # idempotent; a finished request is left as it is


def _answer(item: _Item) -> dict[str, Any]:
    """An item's result object: its audio (base64, its format) or its error (OpenAI's error object)."""
    out: dict[str, Any] = {"index": item.index, "id": item.id}
    r = item.result
    if item.error is None and r is not None:
        item.error = ending_error(r)
    if item.error is not None:
        return {**out, "status": "error", "error": item.error.body()["error"]}
    data = audio.encode_whole(r.audio, item.spec, r.sample_rate)
    m = r.metrics
    return {**out, "status": "success", "audio_data": base64.b64encode(data).decode(),
            "media_type": audio.CONTENT_TYPES[item.spec.format], "response_format": item.spec.format,
            "sample_rate": item.spec.sample_rate, "channels": item.spec.channels,
            "finish_reason": r.finish_reason, "audio_seconds": round(m.audio_seconds, 4), "frames": m.frames,
            **({"words": [word_json(w) for w in r.words]} if item.words else {})}


def _answers(items: list[_Item]) -> list[dict[str, Any]]:
    return [_answer(item) for item in items]


@router.post(PATH)
async def create_speech_batch(request: Request) -> Response:
    st = server_state(request)
    raw = await request.body()
    items = await anyio.to_thread.run_sync(_accept, st, raw, request.headers.get("content-type", ""))
    if not await _gather(items, request.receive):
        return Response(status_code=499)  # the client left; nobody reads this
    results = await anyio.to_thread.run_sync(_answers, items)  # encoding: off the event loop
    ok = sum(r["status"] == "success" for r in results)
    body = {"id": f"batch-{uuid.uuid4().hex}", "object": "speech.batch", "results": results, "total": len(results),
            "succeeded": ok, "failed": len(results) - ok}
    return JSONResponse(body)
