"""`python -m v2 serve --replicas N`: the OpenAI-compatible app on Ray Serve, N runtime replicas behind one endpoint.

Owns: the Serve deployment (each replica loads its own `Runtime` and builds the very app `v2 serve` runs
with `create_app`, so routes, streaming and errors are the same), least-loaded routing (every request goes to
the replica with the fewest requests in flight), a response header naming the replica that answered,
starting it all on a host and port, printing the URL, and stopping on SIGTERM / SIGINT (replicas drain
for `--drain-timeout`). A replica that dies fails only the requests it was serving (the proxy cuts their
responses); Serve starts a new replica in its place.
Must not know: routes, request mapping, audio encoding, the engine's internals.
"""

from __future__ import annotations

import argparse
import signal
import threading
from typing import Any

import ray
from ray import serve
from ray.serve.config import HTTPOptions, RequestRouterConfig
from ray.serve.request_router import FIFOMixin, PendingRequest, RequestRouter, RunningReplica
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from v2.card import load_card
from v2.runtime import Runtime
from v2.server import ServerConfig, create_app

REPLICA_HEADER = "x-v2-replica"  # the Ray actor name of the replica that served the response
APP_NAME = "v2"


class LeastLoadedRouter(FIFOMixin, RequestRouter):
    """Offer every replica as a candidate: the router then asks each for its queue length (or reads its
    cache of them) and sends the request to the shortest; ties go to either."""

    async def choose_replicas(self, candidate_replicas: list[RunningReplica],
                              pending_request: PendingRequest | None = None) -> list[list[RunningReplica]]:
        return [candidate_replicas] if candidate_replicas else []


class _NameReplica:
    """ASGI wrapper that adds the replica's name to every HTTP response's headers."""

    def __init__(self, app: ASGIApp, name: str) -> None:
        self.app, self.name = app, name.encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def named(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), (REPLICA_HEADER.encode(), self.name)]}
            await send(message)

        await self.app(scope, receive, named)


class SpeechReplica:
    """One Serve replica: a runtime and the app over it (wrapped by `deployment` below)."""

    def __init__(self, card: str, runtime_options: dict[str, Any], config: ServerConfig) -> None:
        self.runtime = Runtime.from_card(card, **runtime_options)
        self.config = config
        self.name = serve.get_replica_context().replica_id.to_full_id_str()

    def __serve_build_asgi_app__(self) -> ASGIApp:
        return _NameReplica(create_app(self.runtime, self.config), self.name)

    def __del__(self) -> None:
        runtime = getattr(self, "runtime", None)
        if runtime is not None:
            runtime.close(drain=False, timeout=10)


def deployment(card: str, *, replicas: int, runtime_options: dict[str, Any], config: ServerConfig,
               resources: dict[str, Any], drain_timeout: float = 30.0) -> Any:
    """The bound Serve application: `replicas` copies of the speech app, least-loaded routing.

    A replica takes up to the card's `max_running` requests at once (its batch); the rest wait at the
    router for whichever replica frees a place first, up to `max_waiting` per replica, then get a 503.
    """
    loop = load_card(card).loops.ar_decode
    ingress = serve.ingress()(SpeechReplica)
    d = serve.deployment(ingress, name="speech", num_replicas=replicas, ray_actor_options=resources,
                         max_ongoing_requests=loop.max_running, max_queued_requests=loop.max_waiting * replicas,
                         graceful_shutdown_timeout_s=drain_timeout,
                         request_router_config=RequestRouterConfig(request_router_class=LeastLoadedRouter))
    return d.bind(card, runtime_options, config)


def start(app: Any, host: str, port: int) -> str:
    """Start Serve's HTTP proxy on host:port and run the app at "/"; returns the endpoint's URL."""
    serve.start(http_options=HTTPOptions(host=host, port=port))
    serve.run(app, name=APP_NAME, route_prefix="/", blocking=False)
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}"


def run(args: argparse.Namespace) -> int:
    """The `serve` command with `--replicas N`: Ray (started here unless `RAY_ADDRESS` names a cluster),
    Serve on --host/--port, N replicas; blocks until SIGTERM or SIGINT, then drains and exits 0."""
    if args.port == 0:
        raise ValueError("--port: Ray Serve's proxy needs a fixed port with --replicas (0 is not supported)")
    if not ray.is_initialized():
        ray.init(include_dashboard=False, logging_level="WARNING")
    config = ServerConfig.for_card(load_card(args.card).name, served_names=args.served_model_name,
                                   openai_aliases=not args.no_openai_aliases, api_key=args.api_key or None,
                                   max_body_bytes=int(args.max_body_mb * 2**20), max_input_chars=args.max_input_chars,
                                   allowed_media_path=args.allowed_local_media_path,
                                   allowed_origins=tuple(getattr(args, "allow_origin", None) or ()))
    gpus = ray.cluster_resources().get("GPU", 0) > 0
    resources = {"num_gpus": 1} if gpus else {"num_cpus": 1}
    options = {"checkpoint": args.checkpoint, "codec_checkpoint": args.codec_checkpoint, "device": args.device}
    app = deployment(args.card, replicas=args.replicas, runtime_options=options, config=config,
                     resources=resources, drain_timeout=args.drain_timeout)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    url = start(app, args.host, args.port)
    print(f"v2 serving {config.model_names[0]} on {args.replicas} replicas at {url} "
          f"(playground: {url}/, API: {url}/v1)", flush=True)
    stop.wait()
    serve.shutdown()
    return 0
