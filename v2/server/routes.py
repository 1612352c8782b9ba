"""Every route but speech: models, the voice store, health, metrics, and the playground page.

Owns: `GET /v1/models` (the served names, aliases included, each with `seeded_noise`: whether the weights
are seeded noise, which the playground plays quieter, and `chat`: whether it answers chat completions, which
the playground then offers), `GET/POST/DELETE /v1/audio/voices` (GET
`?legacy=true`: Kokoro's plain list of names; POST: multipart `name`, `audio_sample` or `speaker_embedding` (a
JSON list of numbers: a voice from a precomputed speaker embedding, where the family's voices can be one),
optional `ref_text` and `replace` (a taken name is a 409 unless it is true); each text part at most the
server's `max_part_bytes` (`--max-part-mb`), refused naming it: the form parser's own cap is lifted to the body's,
which the gate bounds; `DELETE /v1/audio/voices/{name}` or `?name=`; the store's routes are `store`'s: on a chat
card, which stores no voices, `no_store`'s answer in their place: 405 for POST and DELETE /v1/audio/voices,
404 naming `name` under /v1/audio/voices/{name}), `GET
/health` (the engine answers `stats()` within 2 s, version, weight version), `GET /metrics` (Prometheus text)
and `GET /` (the static playground page). Store calls and stats run in worker threads.
Must not know: the engine's internals, audio encoding, how the speech route streams.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import anyio
from fastapi import APIRouter, File, Form, Request, Response, UploadFile
from fastapi.responses import FileResponse, JSONResponse

from v2 import __version__
from v2.fields import shown
from v2.server.chat_schema import is_chat_card
from v2.server.errors import ApiError
from v2.server.metrics import CONTENT_TYPE
from v2.server.state import server_state

STATIC = Path(__file__).resolve().parent / "static"
router = APIRouter()
store = APIRouter()  # the voice store's routes (POST, DELETE): where there is a store to change
no_store = APIRouter()  # in their place on a chat card: it stores no voices, it speaks with its speakers
_STARTED = int(time.time())
_BODY_BOUNDS_IT = 2**62  # the form parser's cap on a text part: lifted (the gate bounds the body; the route, each part)


@router.get("/v1/models")
async def list_models(request: Request) -> dict[str, object]:
    st = server_state(request)
    chat = is_chat_card(getattr(st.runtime, "request_fields", ()))
    return {"object": "list", "data": [{"id": n, "object": "model", "created": _STARTED, "owned_by": "v2",
                                        "seeded_noise": st.seeded_noise, "chat": chat} for n in st.config.model_names]}


@router.get("/v1/audio/voices")
async def list_voices(request: Request, legacy: bool = False) -> dict[str, object]:
    """The voices a request may name; `?legacy=true`: Kokoro-FastAPI's shape, `{"voices": [name, ...]}`."""
    book = server_state(request).voices
    entries = await anyio.to_thread.run_sync(book.listing)
    if legacy:
        return {"voices": [e["id"] for e in entries]}
    return {"voices": entries, "cloning": book.store is not None}


@store.post("/v1/audio/voices", form_limits={"max_part_size": _BODY_BOUNDS_IT})
async def add_voice(request: Request, name: str = Form(...), audio_sample: UploadFile | None = File(None),
                    ref_text: str | None = Form(None), replace: bool = Form(False),
                    speaker_embedding: str | None = Form(None, description=(
                        "instead of audio_sample: a precomputed speaker embedding, a JSON list of the speaker "
                        "encoder's width (where the model's voices are one)"))) -> dict[str, object]:
    st = server_state(request)
    book = st.voices
    for part, text in (("name", name), ("ref_text", ref_text), ("speaker_embedding", speaker_embedding)):
        if text is not None and len(text) * 4 > st.config.max_part_bytes and \
                (size := len(text.encode("utf-8", "surrogatepass"))) > st.config.max_part_bytes:
            raise ApiError(400, f"{part}: {size} bytes, over this server's limit of {st.config.max_part_bytes} "
                           "bytes a form field (--max-part-mb)", param=part, code="string_above_max_length")
    if not name.strip():
        raise ApiError(400, "name: must not be empty", param="name", code="invalid_value")
    if speaker_embedding is not None:
        if audio_sample is not None:
            raise ApiError(400, "speaker_embedding: give audio_sample or speaker_embedding, not both",
                           param="speaker_embedding", code="invalid_value")
        embedding = embedding_list(speaker_embedding)
        await anyio.to_thread.run_sync(book.add, name, None, ref_text, replace, embedding)
        return {"success": True, "voice": {"id": name, "name": name, "kind": "stored", "ref_text": ref_text,
                                           "embedding_source": "direct"}}
    if audio_sample is None:
        raise ApiError(400, "audio_sample: give a recording of the voice (or speaker_embedding)",
                       param="audio_sample", code="invalid_value")
    data = await audio_sample.read()
    if not data:
        raise ApiError(400, "audio_sample: the file is empty", param="audio_sample", code="invalid_value")
    await anyio.to_thread.run_sync(book.add, name, data, ref_text, replace)
    return {"success": True, "voice": {"id": name, "name": name, "kind": "stored", "ref_text": ref_text,
                                       "embedding_source": "audio"}}


def embedding_list(text: str) -> list[float]:
    """The form field `speaker_embedding`: a JSON list of numbers (vllm-omni's field); its width and values
    are the family's to check."""
    try:
        value = json.loads(text)
    except ValueError:
        value = None
    if not isinstance(value, list) or not value or not all(
            isinstance(x, (int, float)) and not isinstance(x, bool) for x in value):
        raise ApiError(400, "speaker_embedding: expected a JSON list of numbers (the speaker encoder's output)",
                       param="speaker_embedding", code="invalid_value")
    numbers = []
    for i, x in enumerate(value):
        try:
            numbers.append(float(x))
        except OverflowError:  # an integer past float's range (JSON has no bound on integers)
            raise ApiError(400, f"speaker_embedding: value {i} is {shown(x)}, beyond a float's range (every value "
                           "must be finite)", param="speaker_embedding", code="invalid_value") from None
    return numbers


@store.delete("/v1/audio/voices/{name}")
async def delete_voice(request: Request, name: str) -> dict[str, object]:
    await anyio.to_thread.run_sync(server_state(request).voices.remove, name)
    return {"id": name, "object": "voice", "deleted": True}


@store.delete("/v1/audio/voices")
async def delete_voice_by_query(request: Request, name: str | None = None) -> dict[str, object]:
    if not name:
        raise ApiError(400, "name: give the voice to delete (/v1/audio/voices/NAME or ?name=NAME)", param="name",
                       code="invalid_value")
    return await delete_voice(request, name)


NO_STORE = ("a chat model stores no voices: it speaks with its own speakers, the voices `audio.voice` takes, which "
            "GET /v1/audio/voices lists")


async def _stores_none(request: Request) -> Response:
    """POST and DELETE /v1/audio/voices on a chat card: not published, so a 405 (only GET and HEAD are)."""
    raise ApiError(405, NO_STORE, code="method_not_allowed", headers={"Allow": "GET, HEAD"})


async def _no_stored(request: Request, name: str) -> Response:
    """/v1/audio/voices/{name} on a chat card: no such resource (no stored voice), whatever the method."""
    raise ApiError(404, f"name: no stored voice {name!r}: {NO_STORE}", param="name", code="voice_not_found")


no_store.add_api_route("/v1/audio/voices", _stores_none, methods=["POST", "DELETE"], include_in_schema=False)
no_store.add_api_route("/v1/audio/voices/{name}", _no_stored, include_in_schema=False,
                       methods=["GET", "POST", "PUT", "PATCH", "DELETE"])


@router.get("/health")
async def health(request: Request) -> JSONResponse:
    st = server_state(request)
    try:
        with anyio.fail_after(2.0):
            stats = await anyio.to_thread.run_sync(st.runtime.stats, abandon_on_cancel=True)
    except TimeoutError:
        return JSONResponse({"status": "unresponsive", "engine": "no answer to stats() within 2 s",
                             "version": __version__}, status_code=503)
    return JSONResponse({"status": "draining" if st.draining else "ok", "engine": "alive", "version": __version__,
                         "model": st.config.model_names[0], "weight_version": st.runtime.weight_version,
                         "running": stats.get("running"), "waiting": stats.get("waiting"),
                         "steps": stats.get("steps")}, status_code=503 if st.draining else 200)


@router.get("/metrics")
async def metrics(request: Request) -> Response:
    text = await anyio.to_thread.run_sync(server_state(request).metrics.render)
    return Response(text, media_type=CONTENT_TYPE)


@router.get("/", include_in_schema=False)
async def playground() -> FileResponse:
    return FileResponse(STATIC / "index.html", media_type="text/html")
