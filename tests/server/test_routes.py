"""Disconnects free the runtime at once; models, health and Prometheus metrics reflect what ran."""

from __future__ import annotations

import json
import socket
import time

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from serverkit import CARD, TEXT, LiveServer, in_process, shared_runtime, wait_idle
from holds import slow_frames
from v2 import __version__

SPEECH = "/v1/audio/speech"
LONG = {"input": TEXT, "max_frames": 600, "min_frames": 600}  # ~10 s of work on the tiny card


@pytest.fixture(scope="module")
def live():
    with LiveServer(shared_runtime()) as server:
        yield server


def _running_soon(rt, timeout: float = 120.0) -> None:
    deadline = time.time() + timeout
    while rt.stats()["running"] == 0:
        assert time.time() < deadline, "the request never started"
        time.sleep(0.005)


@pytest.mark.parametrize("stream", [True, False])
def test_a_client_that_leaves_frees_its_slots(live, stream, monkeypatch):
    rt = shared_runtime()
    wait_idle(rt)
    # each frame takes at least 10 ms: 300 steps take >= 3 s however fast the host is, far more than the server
    # takes to see the client go; a server that never cancels runs all 600
    slow_frames(rt.family.ar_loop, monkeypatch, 0.01)
    steps_before = rt.stats()["steps"]
    if stream:
        with httpx.stream("POST", live.url + SPEECH, json={**LONG, "response_format": "pcm"}, timeout=30) as r:
            pieces = r.iter_bytes()
            assert next(pieces)  # audio is flowing; leaving the block closes the connection
    else:  # a whole-file request: the client gives up while it runs
        body = json.dumps({**LONG, "response_format": "wav"}).encode()
        with socket.create_connection(("127.0.0.1", int(live.url.rsplit(":", 1)[1]))) as sock:
            sock.sendall(f"POST {SPEECH} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                         f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
            _running_soon(rt)
    stats = wait_idle(rt, timeout=120)  # a hang check: the steps show it was cancelled, not run to its end
    assert stats["steps"] - steps_before < 300


def test_models_lists_the_card_and_openai_aliases(live):
    data = httpx.get(live.url + "/v1/models").json()
    ids = [m["id"] for m in data["data"]]
    assert data["object"] == "list" and ids[0] == CARD
    assert {"tts-1", "tts-1-hd", "gpt-4o-mini-tts"} <= set(ids)
    assert all(m["object"] == "model" for m in data["data"])


def test_models_say_whether_the_weights_are_seeded_noise(live):
    """`seeded_noise`: as the card's `seeded` weight sources say (the tiny cards'; no release card has any),
    unless the server is told (`serve --checkpoint DIR` says False: the given weights speak)."""
    from types import SimpleNamespace

    from v2.card import known_cards, load_card
    from v2.server import ServerConfig

    assert all(m["seeded_noise"] is True for m in httpx.get(live.url + "/v1/models").json()["data"])
    config = ServerConfig.for_card(CARD)
    seeded = {n for n in known_cards() if config.seeded_for(SimpleNamespace(card=load_card(n)))}
    assert seeded == {n for n in known_cards() if n.endswith("_tiny")}  # every embedded card, no release card
    assert len(seeded) >= 2 and len(seeded) < len(known_cards())
    with LiveServer(shared_runtime(), ServerConfig.for_card(CARD, seeded_noise=False)) as server:
        assert all(m["seeded_noise"] is False for m in httpx.get(server.url + "/v1/models").json()["data"])


def test_served_model_name_replaces_the_listing_and_aliases_can_be_off():
    from v2.server import ServerConfig

    config = ServerConfig.for_card(CARD, served_names=["my-voice-model"], openai_aliases=False)
    with LiveServer(shared_runtime(), config) as server:
        assert [m["id"] for m in httpx.get(server.url + "/v1/models").json()["data"]] == ["my-voice-model", CARD]
        r = httpx.post(server.url + SPEECH, json={"model": "tts-1", "input": TEXT})
        assert r.status_code == 404 and r.json()["error"]["code"] == "model_not_found"


def test_health_reports_the_engine_and_versions(live):
    h = httpx.get(live.url + "/health").json()
    assert h["status"] == "ok" and h["engine"] == "alive" and h["version"] == __version__
    assert h["weight_version"] == shared_runtime().weight_version and h["model"] == CARD


def _samples(text: str) -> dict[tuple[str, tuple], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_metrics_count_what_ran(live):
    rt = shared_runtime()
    before = _samples(httpx.get(live.url + "/metrics").text)
    ref = in_process(rt, text=TEXT, seed=21, max_frames=16)
    r = httpx.post(live.url + SPEECH, json={"input": TEXT, "seed": 21, "max_frames": 16, "response_format": "wav"})
    assert r.status_code == 200
    httpx.post(live.url + SPEECH, json={"input": TEXT, "speed": 3.0})  # one refusal
    after: dict = {}

    def delta(name: str, **labels: str) -> float:
        key = (name, tuple(sorted(labels.items())))
        return after.get(key, 0.0) - before.get(key, 0.0)

    deadline = time.time() + 120  # results are recorded on the runtime's callback thread (a hang check)
    while time.time() < deadline and delta("v2_requests_total", finish_reason=ref.finish_reason) < 1:
        after = _samples(httpx.get(live.url + "/metrics").text)
    assert delta("v2_requests_total", finish_reason=ref.finish_reason) == 1
    assert delta("v2_audio_seconds_total") == pytest.approx(ref.metrics.audio_seconds)
    assert delta("v2_ttfa_seconds_count") == 1 and delta("v2_rtf_count") == 1
    assert delta("v2_requests_refused_total", status="400") == 1
    assert delta("v2_step_calls_total", kind="ar_frame") >= 16
    assert delta("v2_step_seconds_total", kind="ar_frame") > 0
    stats = rt.stats()
    assert after[("v2_queue_depth", ())] == stats["waiting"]
    assert ("v2_slots_in_use", (("pool", "kv"),)) in after and ("v2_slots_in_use", (("pool", "codec"),)) in after
    assert after[("v2_weight_version", ())] == rt.weight_version
    assert after[("v2_engine_steps_total", ())] > 0


@pytest.mark.parametrize("stats", [{"prefix_cache_hits": 3, "prefix_cache_misses": 4, "kv_blocks_free": 9},
                                   {"prefix_cache": {"hits": 3, "misses": 4}}])
def test_the_collector_reads_the_stats_the_runtime_reports(stats):
    from v2.server.metrics import ServerMetrics

    base = {"waiting": 2, "running": 1, "kv_slots_in_use": 1, "codec_slots_in_use": 0, "steps": 7,
            "kinds": {"ar_frame": {"calls": 5, "rows": 6, "seconds": 0.5}}, "weight_version": 2}
    got = _samples(ServerMetrics(lambda: {**base, **stats}).render().decode())
    assert got[("v2_prefix_cache_hits_total", ())] == 3 and got[("v2_prefix_cache_misses_total", ())] == 4
    assert (("v2_kv_blocks_free", ()) in got) == ("kv_blocks_free" in stats)
    assert got[("v2_queue_depth", ())] == 2 and got[("v2_engine_steps_total", ())] == 7
    assert got[("v2_step_rows_total", (("kind", "ar_frame"),))] == 6
    assert got[("v2_slots_in_use", (("pool", "codec"),))] == 0


def test_x_vector_only_mode_is_refused_where_the_family_has_none(live):
    """MOSS-TTS-Local's clones take no x-vector-only mode: the extension is refused naming it, not ignored."""
    r = httpx.post(live.url + "/v1/audio/speech", json={"input": "Hi.", "ref_audio": "data:audio/wav;base64,UklGRg==",
                                                       "x_vector_only_mode": True, "stream": False}, timeout=60)
    err = r.json()["error"]
    assert r.status_code == 400 and err["param"] == "x_vector_only_mode" and err["code"] == "unsupported", err
