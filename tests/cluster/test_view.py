"""The deployment's view, merged from replicas' reports: /health is 200 while any replica is up, "ok" only when
as many as the deployment wants are, loads summed over those up; /metrics carries every replica's series
under its own `replica` label, unchanged, and counts the replicas by state."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from v2.cluster.view import STATES, Report, health, metrics
from v2.server.metrics import ServerMetrics

REASONS = ("stop", "length", "abort", "error")


def report(i: int, state: str, running: int, steps: int, text: str | None = None) -> Report:
    up = state == "up"
    body = {"status": "ok" if up else "draining" if state == "draining" else "unresponsive", "version": "0.1.0",
            "model": "tiny", "weight_version": 0, "running": running, "waiting": 0, "steps": steps}
    return Report(f"SERVE_REPLICA::v2#speech#r{i}", state, None if state in ("starting", "down") else body, text,
                  None if state != "down" else "ActorDiedError")


@given(st.lists(st.tuples(st.sampled_from(STATES), st.integers(0, 64), st.integers(0, 10**6)), max_size=6),
       st.integers(1, 6))
def test_health_is_ok_only_with_every_wanted_replica_up_and_serves_while_any_is(replicas, target):
    reports = [report(i, *r) for i, r in enumerate(replicas)]
    code, body = health(reports, target, reports[0].actor if reports else "SERVE_REPLICA::v2#speech#r0")
    up = [r for r in replicas if r[0] == "up"]
    assert code == (200 if up else 503)
    assert body["status"] == ("ok" if up and len(up) >= target else "degraded" if up else "unavailable")
    assert (body["replicas_up"], body["replicas_target"]) == (len(up), target)
    assert body["running"] == sum(r[1] for r in up) and body["steps"] == sum(r[2] for r in up)
    assert [(e["replica"], e["state"]) for e in body["replicas"]] == [(f"r{i}", r[0]) for i, r in enumerate(replicas)]
    assert all("error" in e for e in body["replicas"] if e["state"] in ("down", "unresponsive"))


@settings(max_examples=25, deadline=None)
@given(st.lists(st.lists(st.sampled_from(REASONS), max_size=8), min_size=1, max_size=4), st.data())
def test_metrics_keep_every_replicas_series_under_its_label(ended, data):
    states = [data.draw(st.sampled_from(STATES)) for _ in ended]
    reports = []
    for i, (reasons, state) in enumerate(zip(ended, states)):
        m = ServerMetrics(lambda i=i: {"waiting": i, "running": 1, "steps": 10 * i, "kv_slots_in_use": i})
        for reason in reasons:
            m.requests.labels(reason).inc()
            m.audio.inc(0.5)
            m.ttfa.observe(0.1 * (i + 1))
        reports.append(report(i, state, 1, 10 * i, m.render().decode() if state in ("up", "draining") else None))
    samples: dict[tuple, float] = {}
    for family in text_string_to_metric_families(metrics(reports, len(reports)).decode()):
        for s in family.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    for state in STATES:
        assert samples[("v2_replicas", (("state", state),))] == states.count(state)
    assert samples[("v2_replicas_target", ())] == len(reports)
    for i, (reasons, state) in enumerate(zip(ended, states)):
        me = ("replica", f"r{i}")
        counts = {k[1][0][1]: v for k, v in samples.items() if k[0] == "v2_requests_total" and me in k[1]}
        if state not in ("up", "draining"):  # no report: no series
            assert not any(me in labels for _, labels in samples), i
            continue
        assert counts == {r: reasons.count(r) for r in set(reasons)}
        assert samples[("v2_audio_seconds_total", (me,))] == 0.5 * len(reasons)
        assert samples[("v2_ttfa_seconds_count", (me,))] == len(reasons)
        assert samples[("v2_queue_depth", (me,))] == i and samples[("v2_engine_steps_total", (me,))] == 10 * i
