"""`python -m v2 serve --replicas N`: the OpenAI-compatible app on Ray Serve, N runtime replicas behind one endpoint.

Owns: the Serve deployment (each replica loads its own `Runtime` and builds the very app `v2 serve` runs
with `create_app`, so routes, streaming and errors are the same), least-loaded routing (every request goes to
the replica with the fewest requests in flight), a response header naming the replica that answered,
`GET /health` and `GET /metrics` answered for the whole deployment by whichever replica gets them (view.py),
starting it all on a host and port with Ray's own console output kept out of the server's (its logs stay in
its session folder unless `--ray-logs`), printing the URL, and stopping on SIGTERM / SIGINT (replicas drain
for `--drain-timeout`). A replica that dies fails only the requests it was serving (the proxy cuts their
responses); Serve starts a new replica in its place.
Must not know: routes, request mapping, audio encoding, the engine's internals.
"""

from __future__ import annotations

import argparse
import logging
import signal
import threading
from typing import Any

import ray
from ray import serve
from ray.serve.config import HTTPOptions, RequestRouterConfig
from ray.serve.request_router import FIFOMixin, PendingRequest, RequestRouter, RunningReplica
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from v2.card import load_card
from v2.cluster import view
from v2.cluster.pool import decode_limits
from v2.runtime import Runtime
from v2.server import ServerConfig, create_app
from v2.server.metrics import CONTENT_TYPE

REPLICA_HEADER = "x-v2-replica"  # the Ray actor name of the replica that served the response
APP_NAME = "v2"


class LeastLoadedRouter(FIFOMixin, RequestRouter):
    """Offer every replica as a candidate: the router then asks each for its queue length (or reads its
    cache of them) and sends the request to the shortest; ties go to either."""

    async def choose_replicas(self, candidate_replicas: list[RunningReplica],
                              pending_request: PendingRequest | None = None) -> list[list[RunningReplica]]:
        return [candidate_replicas] if candidate_replicas else []


class _ReplicaFront:
    """ASGI wrapper in front of a replica's app: adds the replica's name to every HTTP response's headers, and
    answers `GET /health` and `GET /metrics` for the whole deployment (every replica's report, view.py)."""

    def __init__(self, app: ASGIApp, name: str, replicas: int) -> None:
        self.app, self.name, self.replicas = app, name, replicas

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def named(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []),
                                                  (REPLICA_HEADER.encode(), self.name.encode())]}
            await send(message)

        if scope["method"] in ("GET", "HEAD") and scope["path"] in ("/health", "/metrics"):
            reports = await view.gather(self.name, await view.local_report(self.app))
            if scope["path"] == "/health":
                code, body = view.health(reports, self.replicas, self.name)
                response: Response = JSONResponse(body, status_code=code)
            else:
                response = Response(view.metrics(reports, self.replicas), media_type=CONTENT_TYPE)
            await response(scope, receive, named)
            return
        await self.app(scope, receive, named)


class SpeechReplica:
    """One Serve replica: a runtime and the app over it (wrapped by `deployment` below)."""

    def __init__(self, card: str, runtime_options: dict[str, Any], config: ServerConfig, replicas: int = 1) -> None:
        self.runtime = Runtime.from_card(card, **runtime_options)
        self.config, self.replicas = config, replicas
        self.name = serve.get_replica_context().replica_id.to_full_id_str()
        self.speech_app = create_app(self.runtime, self.config)  # (`app` is the ingress wrapper's)

    def __serve_build_asgi_app__(self) -> ASGIApp:
        return _ReplicaFront(self.speech_app, self.name, self.replicas)

    async def record_routing_stats(self) -> dict[str, Any]:
        """Serve's hook for a replica's own figures, also what the other replicas ask for their view of the
        deployment: this replica's /health and /metrics."""
        return await view.local_report(self.speech_app)

    def __del__(self) -> None:
        runtime = getattr(self, "runtime", None)
        if runtime is not None:
            runtime.close(drain=False, timeout=10)


def deployment(card: str, *, replicas: int, runtime_options: dict[str, Any], config: ServerConfig,
               resources: dict[str, Any], drain_timeout: float = 30.0,
               logging_config: dict[str, Any] | None = None) -> Any:
    """The bound Serve application: `replicas` copies of the speech app, least-loaded routing.
    `logging_config`: Serve's for the replicas (`log_level`, `enable_access_log`: `serve`'s --log-level and
    --no-access-log, which uvicorn takes with one runtime).

    A replica takes up to the card's `max_running` requests at once (its batch); the rest wait at the
    router for whichever replica frees a place first, up to `max_waiting` per replica, then get a 503.
    """
    loop = decode_limits(load_card(card))
    ingress = serve.ingress()(SpeechReplica)
    # Ray annotates RequestRouterConfig's **kwargs as dicts (each value a dict); it takes a router class
    router = RequestRouterConfig(request_router_class=LeastLoadedRouter)  # type: ignore[arg-type]
    # the decorator form: `serve.deployment(cls, **options)` is the same call, but Ray types only this one
    d = serve.deployment(name="speech", num_replicas=replicas, ray_actor_options=resources,
                         max_ongoing_requests=loop.max_running, max_queued_requests=loop.max_waiting * replicas,
                         graceful_shutdown_timeout_s=drain_timeout, request_router_config=router,
                         logging_config=logging_config)(ingress)
    return d.bind(card, runtime_options, config, replicas)


def start(app: Any, host: str, port: int) -> str:
    """Start Serve's HTTP proxy on host:port and run the app at "/"; returns the endpoint's URL."""
    serve.start(http_options=HTTPOptions(host=host, port=port))
    serve.run(app, name=APP_NAME, route_prefix="/", blocking=False)
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}"


def start_ray(show_logs: bool) -> str | None:
    """Ray, started here unless `RAY_ADDRESS` names a cluster (or this process already joined one). Unless
    `show_logs`: no banner, no lines forwarded from the actors (Serve's controller, proxy and replicas), and
    Serve's own driver-side messages only from warnings up. The folder holding Ray's logs, when known."""
    if not show_logs:
        logging.getLogger("ray.serve").setLevel(logging.WARNING)
    if ray.is_initialized():
        return None
    context = ray.init(include_dashboard=False, log_to_driver=show_logs,
                       logging_level=logging.INFO if show_logs else logging.ERROR)
    session = getattr(context, "address_info", {}).get("session_dir")  # a local start's RayContext
    return None if show_logs or not session else f"{session}/logs"


def run(args: argparse.Namespace) -> int:
    """The `serve` command with `--replicas N`: Ray (started here unless `RAY_ADDRESS` names a cluster),
    Serve on --host/--port, N replicas; blocks until SIGTERM or SIGINT, then drains and exits 0."""
    if args.port == 0:
        raise ValueError("--port: Ray Serve's proxy needs a fixed port with --replicas (0 is not supported)")
    logs = start_ray(show_logs=args.ray_logs)
    config = ServerConfig.from_options(load_card(args.card).name, args)  # the options one runtime takes
    gpus = ray.cluster_resources().get("GPU", 0) > 0
    resources = {"num_gpus": 1} if gpus else {"num_cpus": 1}
    options = {"checkpoint": args.checkpoint, "codec_checkpoint": args.codec_checkpoint, "device": args.device,
               "add_loops": tuple(args.add_loop or ()),  # each replica resolves them (entry points or module:attr)
               "aligner": getattr(args, "aligner", None)}
    logs_config = {"log_level": args.log_level.upper(), "enable_access_log": not args.no_access_log}
    app = deployment(args.card, replicas=args.replicas, runtime_options=options, config=config,
                     resources=resources, drain_timeout=args.drain_timeout, logging_config=logs_config)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    url = start(app, args.host, args.port)
    plural = "s" if args.replicas != 1 else ""
    print(f"v2 serving {config.model_names[0]} on {args.replicas} replica{plural} at {url} "
          f"(playground: {url}/, API: {url}/v1)", flush=True)
    if logs:
        print(f"v2: Ray's own logs are in {logs} (--ray-logs shows them here)", flush=True)
    stop.wait()
    serve.shutdown()
    return 0
