"""What the speech-stream tests share: a server's stream URL, reading events and whole utterances with the
`websockets` client (async and sync), and the server's log records while a block runs."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from typing import Any, Iterator

STREAM = "/v1/audio/speech/stream"


def ws_url(server: Any) -> str:
    return server.url.replace("http://", "ws://") + STREAM


async def recv_json(ws: Any, timeout: float = 60) -> dict:
    """The next JSON event (binary frames skipped)."""
    while True:
        msg = await asyncio.wait_for(ws.recv(), timeout)
        if isinstance(msg, str):
            return json.loads(msg)


async def until(ws: Any, kind: str, timeout: float = 60) -> tuple[list[dict], list[bytes]]:
    """Every event and binary frame up to and including the first event of `kind`."""
    events: list[dict] = []
    frames: list[bytes] = []
    while not _took(await asyncio.wait_for(ws.recv(), timeout), kind, events, frames):
        pass
    return events, frames


def sync_until(ws: Any, kind: str, timeout: float = 60) -> tuple[list[dict], list[bytes]]:
    """`until` for the sync client (websockets.sync.client)."""
    events: list[dict] = []
    frames: list[bytes] = []
    while not _took(ws.recv(timeout), kind, events, frames):
        pass
    return events, frames


def _took(msg: str | bytes, kind: str, events: list[dict], frames: list[bytes]) -> bool:
    """One message into `events` or `frames`; True once it is an event of `kind`."""
    if isinstance(msg, bytes):
        frames.append(msg)
        return False
    events.append(json.loads(msg))
    return events[-1]["type"] == kind


class Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def tracebacks(self) -> list[str]:
        """Records that carry a traceback, or say an ASGI application failed."""
        return [f"{r.name}: {r.getMessage()}" for r in self.records
                if r.exc_info or "Exception in ASGI application" in r.getMessage()]


@contextlib.contextmanager
def server_log() -> Iterator[Records]:
    """Every record of the server's loggers (ours, uvicorn's, the ASGI layer's) while the block runs."""
    handler = Records()
    loggers = [logging.getLogger(n) for n in ("v2.server", "uvicorn", "uvicorn.error", "uvicorn.asgi", "")]
    for lg in loggers:
        lg.addHandler(handler)
    try:
        yield handler
    finally:
        for lg in loggers:
            lg.removeHandler(handler)
