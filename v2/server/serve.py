"""`python -m v2 serve`: load one runtime, serve it over HTTP with uvicorn, drain on SIGTERM / Ctrl-C, exit 0.

Owns: the serve options, binding the socket before the model loads (127.0.0.1 unless told otherwise; port 0
picks a free one; a port in use is one `error:` line and exit 1), printing the URL once the server accepts,
and shutting down: on the first SIGTERM or SIGINT new requests get 503 and the listening socket closes,
requests in flight run on for up to `--drain-timeout` seconds, the rest are cancelled (their requests abort),
the runtime is closed, and the process exits 0.
Must not know: routes, request mapping, audio encoding, the engine's internals.
"""

from __future__ import annotations

import argparse
import signal
import socket
import sys
import threading
import time
from types import FrameType
from typing import Any

import uvicorn

from v2.runtime import Runtime
from v2.server.app import create_app
from v2.server.state import ServerConfig, ServerState


class _Server(uvicorn.Server):
    """uvicorn's server that marks the app draining on the first signal and prints its URL once up."""

    def __init__(self, config: uvicorn.Config, state: ServerState, banner: str) -> None:
        super().__init__(config)
        self.state, self.banner = state, banner

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.started:
            print(self.banner, flush=True)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        self.state.draining = True
        super().handle_exit(sig, frame)


def bind(host: str, port: int) -> socket.socket:
    family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(address)
    sock.set_inheritable(True)
    return sock


def url_of(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


class ThreadedServer:
    """uvicorn serving an app on a bound socket in a background thread, for a `with` block (tests, benchmarks).
    No signal handling: the thread that owns the block stops it."""

    def __init__(self, app: Any, host: str = "127.0.0.1", port: int = 0, *, graceful_s: int = 2) -> None:
        self.sock = bind(host, port)
        self.url = url_of(self.sock)
        self.server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off",
                                                    timeout_graceful_shutdown=graceful_s))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True,
                                       name="v2-http")

    def __enter__(self) -> "ThreadedServer":
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("the HTTP server did not start")
            time.sleep(0.01)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(30)


def bind_or_explain(host: str, port: int) -> socket.socket:
    """`bind`, with a port in use (or any address the system refuses) as one line for the command line."""
    from v2.cli import CliError

    try:
        return bind(host, port)
    except OSError as e:
        raise CliError(f"cannot listen on {host}:{port}: {e.strerror or e} (--host, --port)") from None


def run(args: argparse.Namespace) -> int:
    sock = bind_or_explain(args.host, args.port)  # before the model loads: a busy port fails at once
    try:
        runtime = Runtime.from_card(args.card, checkpoint=args.checkpoint, codec_checkpoint=args.codec_checkpoint,
                                    device=args.device)
    except BaseException:
        sock.close()
        raise
    try:
        config = ServerConfig.from_options(runtime.card.name, args)
        app = create_app(runtime, config)
        url = url_of(sock)
        uv = uvicorn.Config(app, log_level=args.log_level, access_log=not args.no_access_log, lifespan="off",
                            timeout_graceful_shutdown=max(args.drain_timeout, 0.001))
        server = _Server(uv, app.state.server, f"v2 serving {config.model_names[0]} at {url} "
                                               f"(playground: {url}/, API: {url}/v1)")
        for sig in (signal.SIGTERM, signal.SIGINT):  # uvicorn re-raises the signal it caught once it has
            signal.signal(sig, _ignore)               # shut down: land it here, so a drained exit is 0
        server.run(sockets=[sock])
    finally:
        runtime.close(drain=False, timeout=30)
    return 0


def _ignore(sig: int, frame: Any) -> None:
    pass


def main(argv: list[str] | None = None) -> int:
    """`python -m v2.server.serve ...` is `python -m v2 serve ...`: the same checks, `--replicas` included."""
    from v2.cli import main as cli

    return cli(["serve", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())
