"""The gate in front of every route, as plain ASGI: 503 while draining, 403 cross-origin, 401 without the key,
413 over the limit, 500 for anything unexpected; HEAD answered by GET routes; a WebSocket handshake held to
the same rules (its Origin always checked, as for a state-changing method) and refused with the same answer.

Owns: refusing a request before a route sees it (shutting down; a state-changing method, anything but
GET/HEAD/OPTIONS, whose `Origin` is neither this server's own, by its `Host`, nor one of `--allow-origin`,
so a web page elsewhere cannot use the server through the user's browser; `/v1/*` without
`Authorization: Bearer KEY` when a key is set, compared in constant time, or for a WebSocket handshake
without that header (a browser can set no header on one) a `Sec-WebSocket-Protocol` entry
`v2.bearer.<KEY as unpadded base64url>`, which the route never sees; a body over the limit, by
Content-Length or by counting the bytes as they arrive); answering HEAD with the GET route's headers and no
body; turning an exception no route handled into a 500 in OpenAI's shape here, inside the app, so uvicorn
never sees it (it would close a keep-alive connection) and the response is counted (a client that left
before its body had come is one log line, not an error); counting every 4xx/5xx response by status for the
metrics.
Must not know: the runtime, audio, request fields.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import logging
from typing import Any

from starlette.requests import ClientDisconnect
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from v2.server.errors import ApiError
from v2.server.state import ServerState


log = logging.getLogger("v2.server")
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
KEY_PROTOCOL = "v2.bearer."  # a WebSocket subprotocol entry carrying the API key: KEY_PROTOCOL + base64url(KEY)


class _TooLarge(Exception):
    pass


class Gate:
    def __init__(self, app: ASGIApp, state: ServerState) -> None:
        self.app, self.state = app, state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "websocket":
            headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
            protocols = [str(p) for p in scope.get("subprotocols") or ()]
            keys = [p for p in protocols if p.startswith(KEY_PROTOCOL)]
            refusal = self._refusal("WEBSOCKET", scope["path"], headers, keys)
            if refusal is None:  # the route sees the other entries only (one of them it may echo)
                await self.app({**scope, "subprotocols": [p for p in protocols if p not in keys]}, receive, send)
            else:
                await self._deny(scope, send, refusal)
            return
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        cfg = self.state.config
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        refusal = self._refusal(scope["method"], scope["path"], headers)
        if refusal is not None:
            await self._reply(send, refusal)
            return
        head = scope["method"] == "HEAD"
        if head:  # a GET route answers; its body is dropped below (uvicorn drops it too)
            scope = {**scope, "method": "GET"}
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
            elif head and message["type"] == "http.response.body":
                if message.get("more_body", False):
                    return
                message = {"type": "http.response.body", "body": b""}
            await send(message)

        try:
            await self.app(scope, counted, watched)
        except _TooLarge:
            if not started:
                await self._reply(send, _too_large(limit))
        except ClientDisconnect:  # the client left before its body had come: nobody to answer, nothing failed
            log.info("%s %s: the client left before its body had come", scope["method"], scope["path"])
        except Exception as e:  # noqa: BLE001 - every route's unexpected failure ends here, logged
            log.exception("unexpected error on %s %s", scope["method"], scope["path"])
            if started:  # a body under way: only cutting the connection tells the client it is incomplete
                raise
            await self._reply(send, ApiError(500, f"internal error: {type(e).__name__}", code="internal_error"))

    def _refusal(self, method: str, path: str, headers: dict[str, str],
                 protocol_keys: list[str] | None = None) -> ApiError | None:
        """Why a request (or a WebSocket handshake, with its subprotocol entries that carry a key) is refused
        before a route sees it; None: it is not."""
        cfg = self.state.config
        if self.state.draining:
            return ApiError(503, "the server is shutting down; try another replica or later", code="shutting_down")
        origin = headers.get("origin")
        if method not in SAFE_METHODS and origin is not None and not _origin_allowed(
                origin, headers.get("host", ""), cfg.allowed_origins):
            return ApiError(403, f"Origin {origin} is not this server's ({headers.get('host', 'no Host')}): "
                                 f"cross-origin {method} refused (allow it with --allow-origin {origin})",
                            code="cross_origin")
        if cfg.api_key and path.startswith("/v1") and not _key_given(headers, protocol_keys, cfg.api_key):
            how = "Authorization: Bearer KEY" + (
                "; from a browser, the WebSocket subprotocols 'v2.speech' and 'v2.bearer.' followed by the key "
                "in unpadded base64url" if protocol_keys is not None else "")
            return ApiError(401, f"a valid API key is required ({how})", code="invalid_api_key")
        length = headers.get("content-length", "")
        if length.isdigit() and int(length) > cfg.max_body_bytes:
            return _too_large(cfg.max_body_bytes)
        return None

    async def _deny(self, scope: Scope, send: Send, error: ApiError) -> None:
        """Refuse a WebSocket handshake: the HTTP answer a route would give (where the server can send one),
        else a close before accepting (the server answers 403)."""
        if "websocket.http.response" in scope.get("extensions", {}):
            await self._reply(send, error, prefix="websocket.")
            return
        self.state.metrics.refuse(error.status)
        await send({"type": "websocket.close", "code": 1008, "reason": error.message[:120]})

    async def _reply(self, send: Send, error: ApiError, prefix: str = "") -> None:
        self.state.metrics.refuse(error.status)
        body = error.encoded()
        headers: list[Any] = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
        headers += [(k.lower().encode(), v.encode()) for k, v in error.headers.items()]
        if error.status == 401:
            headers.append((b"www-authenticate", b"Bearer"))
        await send({"type": prefix + "http.response.start", "status": error.status, "headers": headers})
        await send({"type": prefix + "http.response.body", "body": body})


def _key_given(headers: dict[str, str], protocol_keys: list[str] | None, key: str) -> bool:
    """The request carries `key`, compared in constant time: as `Authorization: Bearer KEY`, or, a WebSocket
    handshake without that header, as its one subprotocol entry `v2.bearer.<base64url KEY>`."""
    if "authorization" in headers or not protocol_keys:
        scheme, _, token = headers.get("authorization", "").partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(token.strip().encode(), key.encode())
    if len(protocol_keys) != 1:
        return False
    text = protocol_keys[0][len(KEY_PROTOCOL):]
    try:
        given = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        return False
    return hmac.compare_digest(given, key.encode())


def _origin_allowed(origin: str, host: str, allowed: tuple[str, ...]) -> bool:
    """Same origin: the Origin's host[:port] is the Host the request was sent to (the scheme is not compared:
    behind a TLS proxy the server speaks http to the proxy). Else it must be listed ("*": any origin)."""
    origin = origin.strip().lower().rstrip("/")
    _, sep, netloc = origin.partition("://")
    if sep and netloc and netloc == host.strip().lower():
        return True
    return "*" in allowed or origin in allowed


def _too_large(limit: int) -> ApiError:
    return ApiError(413, f"the request body is over the limit of {limit} bytes", code="request_too_large")
