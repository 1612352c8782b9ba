"""Prometheus metrics for `GET /metrics`: what the server saw, and the runtime's own counters at scrape time.

Owns: one registry per app (two apps in a process never collide): requests by finish reason, refusals by
HTTP status, TTFA and RTF histograms, audio seconds produced, open streams; and a collector that reads
`runtime.stats()` when scraped: queue depth, running requests, slots in use, engine steps, step calls,
rows and host seconds by work kind, shared prefills, prefix-cache hits and misses and free KV blocks
(when the runtime reports them), the weight version.
Must not know: HTTP routes, FastAPI, audio encoding.
"""

from __future__ import annotations

from typing import Any, Callable, Iterator

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

CONTENT_TYPE = CONTENT_TYPE_LATEST
_TTFA_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0)
_RTF_BUCKETS = (0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0)


class ServerMetrics:
    def __init__(self, stats: Callable[[], dict[str, Any]]) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        r = self.registry
        self.requests = Counter("v2_requests", "Speech requests ended, by finish reason", ["finish_reason"], registry=r)
        self.refused = Counter("v2_requests_refused", "Requests refused before they ran, by HTTP status", ["status"],
                               registry=r)
        self.ttfa = Histogram("v2_ttfa_seconds", "Time from submit to the first audio chunk", buckets=_TTFA_BUCKETS,
                              registry=r)
        self.rtf = Histogram("v2_rtf", "Real-time factor = generation time / audio duration (lower is better)",
                             buckets=_RTF_BUCKETS, registry=r)
        self.audio = Counter("v2_audio_seconds", "Seconds of audio produced", registry=r)
        self.streams = Gauge("v2_http_streams_active", "Streaming responses open now", registry=r)
        r.register(_RuntimeCollector(stats))

    def observe(self, result: Any) -> None:
        """Record a finished request's `SpeechResult`."""
        self.requests.labels(result.finish_reason).inc()
        m = result.metrics
        self.audio.inc(m.audio_seconds)
        if m.ttfa_s is not None:
            self.ttfa.observe(m.ttfa_s)
        if m.rtf is not None:
            self.rtf.observe(m.rtf)

    def refuse(self, status: int) -> None:
        self.refused.labels(str(status)).inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)


class _RuntimeCollector:
    """Reads the runtime's stats at scrape time; a key the runtime does not report is left out."""

    def __init__(self, stats: Callable[[], dict[str, Any]]) -> None:
        self._stats = stats

    def collect(self) -> Iterator[Metric]:
        s = self._stats()
        gauges = {"v2_queue_depth": ("Requests waiting for a slot", s.get("waiting")),
                  "v2_requests_running": ("Requests admitted and running", s.get("running")),
                  "v2_weight_version": ("Version of the weights in use", s.get("weight_version")),
                  "v2_kv_blocks_free": ("KV cache blocks free (paged KV)", s.get("kv_blocks_free")),
                  "v2_kv_requests_preempted": ("Running requests waiting to recompute their KV", s.get("kv_preempted")),
                  "v2_steps_in_flight": ("Engine steps launched on the device and not yet read", s.get("steps_in_flight"))}
        for name, (doc, value) in gauges.items():
            if value is not None:
                yield GaugeMetricFamily(name, doc, value=value)
        slots = GaugeMetricFamily("v2_slots_in_use", "Slots held, by pool", labels=["pool"])
        for pool in ("kv", "codec"):
            if f"{pool}_slots_in_use" in s:
                slots.add_metric([pool], s[f"{pool}_slots_in_use"])
        yield slots
        counters = {"v2_engine_steps": ("Engine steps run", s.get("steps")),
                    "v2_engine_host_seconds": ("Engine thread seconds in steps, less waits for the device",
                                               s.get("host_seconds")),
                    "v2_kv_preemptions": ("Requests preempted for KV blocks", s.get("kv_preemptions")),
                    "v2_shared_prefills": ("Prompts prefilled once for a group", s.get("shared_prefills")),
                    "v2_prefix_cache_hits": ("Prompt blocks served from the prefix cache", _prefix(s, "hits")),
                    "v2_prefix_cache_misses": ("Prompt blocks not in the prefix cache", _prefix(s, "misses"))}
        for name, (doc, value) in counters.items():
            if value is not None:
                yield CounterMetricFamily(name, doc, value=value)
        kinds = s.get("kinds", {})
        for field, name, doc in (("seconds", "v2_step_seconds", "Host seconds in engine calls, by work kind"),
                                 ("calls", "v2_step_calls", "Batched engine calls, by work kind"),
                                 ("rows", "v2_step_rows", "Request rows run, by work kind")):
            family = CounterMetricFamily(name, doc, labels=["kind"])
            for kind, counts in kinds.items():
                if field in counts:
                    family.add_metric([kind], counts[field])
            yield family


def _prefix(stats: dict[str, Any], what: str) -> Any:
    """A prefix-cache counter, reported flat (`prefix_cache_hits`) or nested (`prefix_cache: {hits}`)."""
    flat = stats.get(f"prefix_cache_{what}")
    return flat if flat is not None else (stats.get("prefix_cache") or {}).get(what)

