"""The gate in front of every route, as plain ASGI: 503 while draining, 401 without the key, 413 over the limit.

Owns: refusing a request before a route sees it (shutting down; `/v1/*` without `Authorization: Bearer KEY`
when a key is set, compared in constant time; a body over the limit, by Content-Length or by counting the
bytes as they arrive) and counting every 4xx/5xx response by status for the metrics.
Must not know: the runtime, audio, request fields.
"""

from __future__ import annotations

import hmac
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from v2.server.errors import ApiError
from v2.server.state import ServerState


class _TooLarge(Exception):
    pass


class Gate:
    def __init__(self, app: ASGIApp, state: ServerState) -> None:
        self.app, self.state = app, state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        cfg = self.state.config
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        refusal = self._refusal(scope["path"], headers)
        if refusal is not None:
            await self._reply(send, refusal)
            return
        limit, seen, started = cfg.max_body_bytes, 0, False

        async def counted() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    raise _TooLarge
            return message

        async def watched(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                if message["status"] >= 400:
                    self.state.metrics.refuse(message["status"])
            await send(message)

        try:
            await self.app(scope, counted, watched)
        except _TooLarge:
            if not started:
                await self._reply(send, _too_large(limit))

    def _refusal(self, path: str, headers: dict[str, str]) -> ApiError | None:
        cfg = self.state.config
        if self.state.draining:
            return ApiError(503, "the server is shutting down; try another replica or later", code="shutting_down")
        if cfg.api_key and path.startswith("/v1"):
            scheme, _, token = headers.get("authorization", "").partition(" ")
            if scheme.lower() != "bearer" or not hmac.compare_digest(token.strip().encode(), cfg.api_key.encode()):
                return ApiError(401, "a valid API key is required (Authorization: Bearer KEY)",
                                code="invalid_api_key")
        length = headers.get("content-length", "")
        if length.isdigit() and int(length) > cfg.max_body_bytes:
            return _too_large(cfg.max_body_bytes)
        return None

    async def _reply(self, send: Send, error: ApiError) -> None:
        self.state.metrics.refuse(error.status)
        body = error.encoded()
        headers: list[Any] = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
        headers += [(k.lower().encode(), v.encode()) for k, v in error.headers.items()]
        if error.status == 401:
            headers.append((b"www-authenticate", b"Bearer"))
        await send({"type": "http.response.start", "status": error.status, "headers": headers})
        await send({"type": "http.response.body", "body": body})


def _too_large(limit: int) -> ApiError:
    return ApiError(413, f"the request body is over the limit of {limit} bytes", code="request_too_large")
