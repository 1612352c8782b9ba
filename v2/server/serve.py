"""`python -m v2 serve`: load one runtime, serve it over HTTP with uvicorn, drain on SIGTERM / Ctrl-C, exit 0.

Owns: the serve options, binding the socket before the model loads (127.0.0.1 unless told otherwise; port 0
picks a free one; a port in use is one `error:` line and exit 1), printing the URL once the server accepts,
and shutting down: on the first SIGTERM or SIGINT new requests get 503 and the listening socket closes,
one line says how many requests are in flight and for how long they may run on (`--drain-timeout`), they
run on up to then, the rest are cancelled (their requests abort), the runtime is closed, and the process
exits 0. A second Ctrl-C stops at once: one line says how many requests it cancels, and requests cancelled
at shutdown leave no traceback in the log.
Must not know: routes, request mapping, audio encoding, the engine's internals.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import socket
import sys
import threading
import time
from types import FrameType
from typing import Any

import uvicorn

from v2.errors import CliError
from v2.runtime import Runtime
from v2.server.app import create_app
from v2.server.state import ServerConfig, ServerState


class _Server(uvicorn.Server):
    """uvicorn's server that marks the app draining on the first signal, says what it drains, and prints its URL
    once up."""

    def __init__(self, config: uvicorn.Config, state: ServerState, banner: str, drain_s: float) -> None:
        super().__init__(config)
        self.state, self.banner, self.drain_s = state, banner, drain_s
        self.stopping = False  # shutdown has begun: a request cancelled from here on is no error

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.started:
            print(self.banner, flush=True)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        self.state.draining = True
        super().handle_exit(sig, frame)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        self.stopping = True
        n = len(self.server_state.tasks)
        if n:
            _say(f"v2 draining: {_requests(n)} in flight, for up to {self.drain_s:g} s (--drain-timeout); "
                 "Ctrl-C again stops now")
        else:
            _say("v2 stopping: no requests in flight")
        watch = asyncio.ensure_future(self._stop_at_second_signal())
        await super().shutdown(sockets)
        if self.force_exit:
            await watch
        else:
            watch.cancel()

    async def _stop_at_second_signal(self) -> None:
        """A second Ctrl-C (uvicorn's `force_exit`): cancel what is in flight at once (their bodies' `finally`
        aborts their requests) and wait briefly for them to end, so the process ends cleanly."""
        while not self.force_exit:
            await asyncio.sleep(0.05)
        tasks = list(self.server_state.tasks)
        _say(f"v2 stopping now: cancelled {_requests(len(tasks))} in flight")
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=10)


def _requests(n: int) -> str:
    return f"{n} request" + ("" if n == 1 else "s")


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


class _QuietShutdown(logging.Filter):
    """Drops uvicorn's lines that `_Server.shutdown` says better ("Waiting for connections to close", "Waiting
    for background tasks") and the traceback of a request cancelled once shutdown has begun (at the drain
    deadline or by a second Ctrl-C): a cancelled request is the shutdown working, not an error."""

    def __init__(self, server: _Server) -> None:
        super().__init__()
        self.server = server

    def filter(self, record: logging.LogRecord) -> bool:
        if not self.server.stopping:
            return True
        if str(record.msg).startswith(("Waiting for connections to close", "Waiting for background tasks")):
            return False
        error = record.exc_info[1] if record.exc_info else None
        return not isinstance(error, asyncio.CancelledError)


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
    try:
        return bind(host, port)
    except OSError as e:
        raise CliError(f"cannot listen on {host}:{port}: {e.strerror or e} (--host, --port)") from None


def run(args: argparse.Namespace) -> int:
    sock = bind_or_explain(args.host, args.port)  # before the model loads: a busy port fails at once
    try:
        runtime = Runtime.from_card(args.card, checkpoint=args.checkpoint, codec_checkpoint=args.codec_checkpoint,
                                    device=args.device, add_loops=tuple(args.add_loop),
                                    aligner=getattr(args, "aligner", None))
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
                                               f"(playground: {url}/, API: {url}/v1)", args.drain_timeout)
        for sig in (signal.SIGTERM, signal.SIGINT):  # uvicorn re-raises the signal it caught once it has
            signal.signal(sig, _ignore)               # shut down: land it here, so a drained exit is 0
        quiet, log = _QuietShutdown(server), logging.getLogger("uvicorn.error")
        log.addFilter(quiet)
        try:
            server.run(sockets=[sock])
        finally:
            log.removeFilter(quiet)
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
