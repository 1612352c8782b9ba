"""The FastAPI application over one runtime: `create_app(runtime, config)`.

Owns: putting the parts together (the gate middleware, the speech route and its batch (batch.py), the speech
stream's WebSocket (ws.py), chat completions (chat.py; on a chat card, the speech routes' refusals before them),
the other routes (on a chat card without the voice store's: routes.py `no_store` answers in their place), the
static playground files, the published schema from openapi.py), the state routes reach, and turning every error
(ours, FastAPI's validation errors, unknown routes, a method a path does not take: 405 with every method
the path takes in `Allow`, the static files' mount and the stream's WebSocket path included) into OpenAI's error
shape; anything unexpected is the gate's 500.
Must not know: the engine's internals, uvicorn, signals, the command line.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.routing import APIRoute
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException
from starlette.routing import Match, Mount

from v2 import __version__
from v2.server import batch, chat, openapi, routes, speech, ws
from v2.server.chat_schema import is_chat_card
from v2.server.docs import add_docs
from v2.server.errors import ApiError
from v2.server.metrics import ServerMetrics
from v2.server.openapi_ws import STREAM
from v2.server.middleware import Gate
from v2.server.state import ServerConfig, ServerState
from v2.server.voices import VoiceBook


def create_app(runtime: Any, config: ServerConfig | None = None) -> FastAPI:
    """An app serving `runtime` (which the caller owns and closes)."""
    config = config or ServerConfig.for_card(runtime.card.name)
    if is_chat_card(getattr(runtime, "request_fields", ())):  # OpenAI's speaking chat models as its aliases
        config = chat.chat_names(config)
    state = ServerState(runtime=runtime, config=config, metrics=ServerMetrics(runtime.stats),
                        voices=VoiceBook(runtime), native_rate=int(runtime.sample_rate),
                        native_channels=int(runtime.channels), seeded_noise=config.seeded_for(runtime))
    # /docs is docs.py's: Swagger UI with its files served from here, not FastAPI's default (a CDN)
    app = FastAPI(title="v2 speech server", version=__version__, docs_url=None, redoc_url=None)
    app.state.server = state
    chat_card = is_chat_card(getattr(runtime, "request_fields", ()))
    if chat_card:  # it speaks its own reply: the speech routes refuse; it stores no voices: their routes refuse
        app.include_router(chat.refusals)
        app.include_router(routes.no_store)
    # the routers whose methods a path takes (a 405's `Allow`); the refusals' are not among them
    app.state.routers = (speech.router, batch.router, chat.router, routes.router,
                         *(() if chat_card else (routes.store,)), ws.router)
    for router in app.state.routers:
        app.include_router(router)
    app.add_api_route(STREAM, _plain_get, methods=["GET"], include_in_schema=False)  # its HTTP side: 404, else 405
    app.mount("/static", StaticFiles(directory=routes.STATIC), name="static")
    add_docs(app)
    app.add_middleware(Gate, state=state)
    app.openapi = lambda: openapi.describe(app)  # type: ignore[method-assign]

    @app.exception_handler(ApiError)
    async def _api_error(request: Request, exc: ApiError) -> JSONResponse:
        return JSONResponse(exc.body(), status_code=exc.status, headers=exc.headers)

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        err = exc.errors()[0]
        loc = [str(x) for x in err.get("loc", ()) if x not in ("body", "query", "path", "form")]
        param = loc[0] if loc else None
        return JSONResponse(ApiError(400, f"{param or 'request'}: {err.get('msg')}", param=param,
                                     code="invalid_value").body(), status_code=400)

    @app.exception_handler(HTTPException)
    async def _http(request: Request, exc: HTTPException) -> JSONResponse:
        headers = dict(exc.headers or {})
        if exc.status_code == 405:
            headers["Allow"] = allowed_methods(app, request.scope)
        return JSONResponse(ApiError(exc.status_code, str(exc.detail), code=f"http_{exc.status_code}").body(),
                            status_code=exc.status_code, headers=headers)

    return app


async def _plain_get() -> None:
    """The stream's path over plain HTTP: its one HTTP method is the WebSocket handshake's GET, so every other
    method is a 405 (`Allow: GET, HEAD`) and a GET that is no handshake a 404 that says what the path is."""
    raise ApiError(404, f"{STREAM} is a WebSocket: open it with a WebSocket handshake (GET with "
                   "`Connection: Upgrade`, `Upgrade: websocket`)", code="http_404")


def allowed_methods(app: FastAPI, scope: Any) -> str:
    """Every method some route of this path takes (Starlette names only the first route's), HEAD with GET.
    The routers' own routes are read too (those `create_app` included: `app.state.routers`): FastAPI may wrap
    included routers in routes without methods. A refusal in place of a route not served takes no method."""
    methods: set[str] = set()
    # a mount (the static files) rewrites `root_path` for what it serves: match from the app's own root again
    scope = {"type": "http", "path": scope["path"], "method": scope.get("method", "GET"),
             "root_path": scope.get("app_root_path", scope.get("root_path", ""))}
    refusals = {r.endpoint for r in routes.no_store.routes if isinstance(r, APIRoute)}  # they take no method
    for route in [*app.router.routes, *(r for router in app.state.routers for r in router.routes)]:
        if isinstance(route, APIRoute) and route.endpoint in refusals:
            continue
        match, _ = route.matches(scope)
        if match is not Match.NONE:
            methods |= set(getattr(route, "methods", None) or ())
            if isinstance(route, Mount) and isinstance(route.app, StaticFiles):
                methods |= {"GET"}  # StaticFiles takes GET and HEAD and names neither in its 405
    if "GET" in methods:
        methods.add("HEAD")
    return ", ".join(sorted(methods))
