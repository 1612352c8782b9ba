"""One view of a Serve deployment: `GET /health` and `GET /metrics` for every replica, whichever one answers.

Owns: a replica's own report (its app's `/health` and `/metrics`, asked in-process over ASGI, so it is exactly
what one `v2 serve` answers), gathering the other replicas' reports (their Serve actors, found by name, asked
through Serve's `record_routing_stats` hook, each within a deadline), each replica's state (up, draining,
unresponsive, starting, down), and merging the reports: the deployment's health (ok / degraded / unavailable,
loads summed, one entry per replica) and its Prometheus text (every replica's series with a `replica` label,
plus how many replicas are in each state).
Must not know: routes beyond those two paths and the health keys they answer, the runtime, audio.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any, Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.parser import text_string_to_metric_families
from starlette.types import ASGIApp, Message

from v2 import __version__

SERVE_NAMESPACE = "serve"      # where Serve names its replica actors: SERVE_REPLICA::<app>#<deployment>#<id>
STATES = ("up", "draining", "unresponsive", "starting", "down")
PEER_TIMEOUT_S = 3.0           # a replica's own /health gives its engine 2 s


@dataclass(frozen=True)
class Report:
    actor: str                          # the replica's Ray actor name (the x-v2-replica header)
    state: str                          # one of STATES
    health: dict[str, Any] | None = None  # its own /health body
    metrics: str | None = None          # its own /metrics text
    error: str | None = None            # why it could not report

    @property
    def replica(self) -> str:
        """The replica's id: the last part of its actor name."""
        return self.actor.rsplit("#", 1)[-1]


# ----- a replica's own report ------------------------------------------------------------------------
async def asgi_get(app: ASGIApp, path: str) -> tuple[int, bytes]:
    """A GET through `app` in this process: its status and body."""
    scope = {"type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"}, "http_version": "1.1",
             "method": "GET", "scheme": "http", "path": path, "raw_path": path.encode(), "query_string": b"",
             "root_path": "", "headers": [(b"host", b"replica")], "client": ("127.0.0.1", 0),
             "server": ("replica", 80)}
    status, parts, ended, asked = 500, [], asyncio.Event(), False

    async def receive() -> Message:
        nonlocal asked
        if not asked:
            asked = True
            return {"type": "http.request", "body": b"", "more_body": False}
        await ended.wait()  # the client stays until the response is complete
        return {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = int(message["status"])
        elif message["type"] == "http.response.body":
            parts.append(message.get("body", b""))
            if not message.get("more_body", False):
                ended.set()

    await app(scope, receive, send)
    return status, b"".join(parts)


async def local_report(app: ASGIApp) -> dict[str, Any]:
    """This replica's /health (status and body) and /metrics, as plain data a Ray call can carry."""
    (code, health), (metrics_code, metrics) = await asyncio.gather(asgi_get(app, "/health"),
                                                                    asgi_get(app, "/metrics"))
    return {"health_status": code, "health": json.loads(health),
            "metrics": metrics.decode() if metrics_code == 200 else None}


def state_of(report: dict[str, Any]) -> str:
    """up: its engine answers and it takes requests; draining: it is shutting down; else unresponsive."""
    health = report["health"]
    if report["health_status"] == 200 and health.get("status") == "ok":
        return "up"
    draining = health.get("status") == "draining" or (health.get("error") or {}).get("code") == "shutting_down"
    return "draining" if draining else "unresponsive"


# ----- the others ------------------------------------------------------------------------------------
def peers(own: str) -> list[str]:
    """The actor names of every live replica of the deployment `own` (an actor name) belongs to."""
    import ray

    prefix = own.rsplit("#", 1)[0] + "#"
    return sorted(a["name"] for a in ray.util.list_named_actors(all_namespaces=True)
                  if a["namespace"] == SERVE_NAMESPACE and a["name"].startswith(prefix))


async def ask(actor: str, timeout: float = PEER_TIMEOUT_S) -> Report:
    """Another replica's report (its `record_routing_stats`), or why there is none."""
    import ray
    from ray.exceptions import ActorUnavailableError, RayActorError

    try:
        handle = ray.get_actor(actor, namespace=SERVE_NAMESPACE)
        pending: asyncio.Future[Any] = asyncio.wrap_future(handle.record_routing_stats.remote().future())
        report: Any = await asyncio.wait_for(pending, timeout)
    except ValueError as e:  # no such actor any more
        return Report(actor, "down", error=str(e))
    except (RayActorError, ActorUnavailableError) as e:
        return Report(actor, "down", error=f"{type(e).__name__}: {e}")
    except asyncio.TimeoutError:
        return Report(actor, "unresponsive", error=f"no report within {timeout:.0f} s")
    except Exception as e:  # noqa: BLE001 (its constructor has not finished: Serve refuses the call)
        return Report(actor, "starting", error=f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
    if not isinstance(report, dict) or "health" not in report:
        return Report(actor, "starting", error="no report yet")
    return Report(actor, state_of(report), report["health"], report["metrics"])


async def gather(own: str, own_report: dict[str, Any]) -> list[Report]:
    """Every replica's report: this one's as given, the others' asked at once."""
    others = [a for a in peers(own) if a != own]
    reports = await asyncio.gather(*(ask(a) for a in others))
    mine = Report(own, state_of(own_report), own_report["health"], own_report["metrics"])
    return sorted([mine, *reports], key=lambda r: r.actor)


# ----- merging ---------------------------------------------------------------------------------------
def health(reports: list[Report], target: int, answered_by: str) -> tuple[int, dict[str, Any]]:
    """The deployment's /health: 200 while any replica is up (status "ok" once `target` are, else "degraded"),
    503 "unavailable" when none is; loads summed over the replicas that are up."""
    up = [r for r in reports if r.state == "up"]
    status = "ok" if up and len(up) >= target else "degraded" if up else "unavailable"
    first = next((r.health for r in reports if r.health), {})
    versions = {r.health.get("weight_version") for r in up if r.health}
    body: dict[str, Any] = {
        "status": status, "version": first.get("version", __version__), "model": first.get("model"),
        "replicas_target": target, "replicas_up": len(up),
        "weight_version": versions.pop() if len(versions) == 1 else None,
        **{k: sum(int(r.health.get(k) or 0) for r in up if r.health) for k in ("running", "waiting", "steps")},
        "answered_by": answered_by.rsplit("#", 1)[-1],
        "replicas": [_entry(r) for r in reports]}
    return (200 if up else 503), body


def _entry(r: Report) -> dict[str, Any]:
    h = r.health or {}
    entry: dict[str, Any] = {"replica": r.replica, "actor": r.actor, "state": r.state}
    entry.update({k: h[k] for k in ("running", "waiting", "steps", "weight_version") if k in h})
    if r.error or r.state == "unresponsive":
        entry["error"] = r.error or h.get("engine")
    return entry


def metrics(reports: list[Report], target: int) -> bytes:
    """The deployment's Prometheus text: each replica's families, every sample labelled `replica`, one HELP and
    TYPE per family; `v2_replicas{state}` and `v2_replicas_target`."""
    families: dict[str, Metric] = {}
    for r in reports:
        if r.metrics is None:
            continue
        for family in text_string_to_metric_families(r.metrics):
            merged = families.setdefault(family.name, Metric(family.name, family.documentation, family.type))
            merged.samples.extend(s._replace(labels={**s.labels, "replica": r.replica}) for s in family.samples)
    states = GaugeMetricFamily("v2_replicas", "Replicas of the deployment, by state", labels=["state"])
    for state in STATES:
        states.add_metric([state], sum(r.state == state for r in reports))
    wanted = GaugeMetricFamily("v2_replicas_target", "Replicas the deployment is to run", value=target)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Families([states, wanted, *families.values()]))
    return generate_latest(registry)


class _Families:
    def __init__(self, families: list[Metric]) -> None:
        self._families = families

    def collect(self) -> Iterator[Metric]:
        yield from self._families
