"""The OpenAI-compatible speech server over one runtime (FastAPI + uvicorn): `create_app`, `ServerConfig`.

Owns: the package's two entry names, imported on first use, so `python -m v2` builds its `serve` options
without the server extra installed.
Must not know: the engine's internals. The package talks to the runtime only through its public API:
`submit`, handles (async iteration, `cancel`, `result`, `on_done`), `stats`, `weight_version`, `close`,
and the voice store where the runtime has one (designs/server.md).
"""

from __future__ import annotations

from typing import Any

__all__ = ["ServerConfig", "create_app"]


def __getattr__(name: str) -> Any:
    if name == "create_app":
        from v2.server.app import create_app

        return create_app
    if name == "ServerConfig":
        from v2.server.state import ServerConfig

        return ServerConfig
    raise AttributeError(name)
