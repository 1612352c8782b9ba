"""Serving replicas on Ray Serve: two runtime replicas behind one HTTP endpoint, least-loaded, streaming the
runtime's own audio; /health and /metrics describe every replica whichever one answers; a replica killed
mid-stream fails only its own request, and Serve brings it back; `serve --replicas` keeps Ray's console
output out of its own."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

ray = pytest.importorskip("ray", reason="the cluster tests need Ray: pip install -e \".[ray,server]\"")
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")  # Ray Serve's own pydantic fields

import httpx  # noqa: E402
import numpy as np  # noqa: E402

from .kit import CARD, wait_for  # noqa: E402
from v2.runtime import Runtime  # noqa: E402
from v2.runtime.device import SimulatedStream  # noqa: E402
from v2.server import ServerConfig  # noqa: E402
from v2.server.audio import to_s16  # noqa: E402
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

TEXT = "The quiet river runs past old stone houses."
ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def paced_device(latency: float) -> object:
    """A device stream made in a replica's process on first use: a simulated device whose steps take >= `latency`
    s each (the same codes, tests/runtime/test_overlap.py), so a request of N frames is in flight for >= N *
    `latency` however fast the host is: the one after it comes while it runs, and a kill lands mid-stream. (A
    local class: sent by value, and a copy starts no device of its own until it is used.)"""

    class PacedDevice:
        def __getattr__(self, name: str) -> object:
            if name.startswith("__"):
                raise AttributeError(name)
            if "_stream" not in self.__dict__:
                self.__dict__["_stream"] = SimulatedStream(latency)
            return getattr(self.__dict__["_stream"], name)

        def __getstate__(self) -> dict[str, object]:
            return {}

        def __setstate__(self, state: dict[str, object]) -> None:
            pass

    return PacedDevice()


@pytest.fixture(scope="module")
def endpoint(ray_cluster):
    from ray import serve

    from v2.cluster.serve import deployment, start

    app = deployment(CARD, replicas=2, runtime_options={"device": "cpu", "stream": paced_device(0.01)},
                     config=ServerConfig.for_card(CARD), resources={"num_cpus": 0.5}, drain_timeout=1.0)
    yield start(app, "127.0.0.1", free_port())
    serve.shutdown()


@pytest.fixture(scope="module")
def single():
    with Runtime.from_card(CARD, device="cpu") as rt:
        yield rt


def body(seed: int, frames: int) -> dict:
    """48 kHz mono pcm: the runtime's samples, channels averaged, s16 (nothing resampled)."""
    return {"input": TEXT, "seed": seed, "max_frames": frames, "min_frames": frames, "response_format": "pcm",
            "sample_rate": 48000, "stream": True}


def expected(single, seed: int, frames: int) -> np.ndarray:
    result = single.submit({"text": TEXT, "seed": seed, "max_frames": frames, "min_frames": frames}).result(120)
    return to_s16(result.audio.mean(axis=0))


class Stream(threading.Thread):
    """One streamed request read on its own thread: its replica's name once the headers arrive, then the bytes
    or the error that ended it."""

    def __init__(self, url: str, request: dict) -> None:
        super().__init__(daemon=True)
        self.url, self.request = url, request
        self.replica: str | None = None
        self.first_bytes = threading.Event()
        self.parts: list[bytes] = []
        self.status: int | None = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with httpx.stream("POST", self.url + "/v1/audio/speech", json=self.request, timeout=120) as r:
                self.status, self.replica = r.status_code, r.headers.get("x-v2-replica")
                for piece in r.iter_bytes():
                    self.parts.append(piece)
                    self.first_bytes.set()
        except Exception as e:  # noqa: BLE001 (what the client sees is the point)
            self.error = e
        self.first_bytes.set()

    def audio(self) -> np.ndarray:
        return np.frombuffer(b"".join(self.parts), "<i2")


def started(url: str, request: dict) -> Stream:
    s = Stream(url, request)
    s.start()
    assert s.first_bytes.wait(60), "no audio within 60 s"
    return s


def test_streams_through_two_least_loaded_replicas_equal_the_runtime(endpoint, single):
    a = started(endpoint, body(21, 120))  # in flight still when b comes: >= 1.2 s on the paced device
    b = started(endpoint, body(22, 12))  # a is in flight on one replica: the other one takes b
    a.join(120)
    b.join(120)
    assert (a.status, b.status, a.error, b.error) == (200, 200, None, None)
    assert a.replica and b.replica and a.replica != b.replica
    assert np.array_equal(a.audio(), expected(single, 21, 120))
    assert np.array_equal(b.audio(), expected(single, 22, 12))
    answered = set()
    for _ in range(6):  # whichever replica answers, the body lists both
        health = httpx.get(endpoint + "/health", timeout=30)
        view = health.json()
        assert health.status_code == 200 and view["status"] == "ok", view
        assert {r["actor"] for r in view["replicas"]} == {a.replica, b.replica}
        assert {r["state"] for r in view["replicas"]} == {"up"} and view["replicas_up"] == view["replicas_target"] == 2
        assert view["answered_by"] == health.headers["x-v2-replica"].rsplit("#", 1)[-1]
        assert view["steps"] == sum(r["steps"] for r in view["replicas"]) > 0
        answered.add(health.headers["x-v2-replica"])
    assert answered <= {a.replica, b.replica}


def scrape(url: str) -> tuple[str, dict[str, dict[tuple, float]]]:
    """GET /metrics: the replica that answered, and each sample's value by name and labels."""
    r = httpx.get(url + "/metrics", timeout=30)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    samples: dict[str, dict[tuple, float]] = {}
    for family in text_string_to_metric_families(r.text):
        for s in family.samples:
            samples.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return r.headers["x-v2-replica"], samples


def ended(samples: dict[str, dict[tuple, float]], replica: str) -> float:
    """Requests a replica has ended (its `v2_requests_total`, every finish reason)."""
    return sum(v for labels, v in samples.get("v2_requests_total", {}).items() if ("replica", replica) in labels)


def test_metrics_carry_every_replica_whichever_answers(endpoint):
    _, before = scrape(endpoint)
    a = started(endpoint, body(23, 120))  # in flight still when b comes
    b = started(endpoint, body(24, 12))
    a.join(120)
    b.join(120)
    assert (a.status, b.status, a.error, b.error) == (200, 200, None, None) and a.replica != b.replica
    ids = {s.replica: s.replica.rsplit("#", 1)[-1] for s in (a, b)}

    def counted() -> bool:  # a request is counted once its handle is done, a moment after its last byte
        _, now = scrape(endpoint)
        return all(ended(now, i) == ended(before, i) + 1 for i in ids.values())

    wait_for(counted, 30, "both requests in the metrics")
    answered = set()
    for _ in range(6):
        who, now = scrape(endpoint)
        answered.add(who)
        for i in ids.values():  # each replica's own series, labelled, in every answer
            assert ended(now, i) == ended(before, i) + 1, (who, i)
            assert now["v2_engine_steps_total"][(("replica", i),)] > 0
            assert (("replica", i),) in now["v2_requests_running"]
        assert now["v2_replicas"][(("state", "up"),)] == 2 and now["v2_replicas_target"][()] == 2
        assert sum(now["v2_audio_seconds_total"].values()) > sum(before.get("v2_audio_seconds_total", {}).values())
    assert answered <= set(ids)


def test_a_killed_replica_fails_only_its_own_request_and_comes_back(endpoint, single):
    from ray import serve

    doomed = started(endpoint, body(31, 300))
    survivor = started(endpoint, body(32, 90))
    assert doomed.replica != survivor.replica
    ray.kill(ray.get_actor(doomed.replica, namespace="serve"), no_restart=True)
    doomed.join(60)
    survivor.join(120)
    # cut mid-stream: the client sees an error (an incomplete chunked body), never a short file
    assert doomed.status == 200 and isinstance(doomed.error, httpx.RemoteProtocolError), doomed.error
    assert 0 < len(doomed.audio()) < len(expected(single, 31, 300))
    assert (survivor.status, survivor.error) == (200, None)
    assert np.array_equal(survivor.audio(), expected(single, 32, 90))
    health = httpx.get(endpoint + "/health", timeout=30)  # the survivor serves: the deployment still can
    view = health.json()
    assert health.status_code == 200 and view["status"] in ("ok", "degraded"), view
    assert survivor.replica in [r["actor"] for r in view["replicas"] if r["state"] == "up"]
    assert doomed.replica not in [r["actor"] for r in view["replicas"] if r["state"] == "up"]

    def two_running() -> bool:
        status = serve.status().applications["v2"].deployments["speech"]
        return status.replica_states.get("RUNNING", 0) == 2

    wait_for(two_running, 60, "Serve to replace the killed replica")
    names = set()
    deadline = time.monotonic() + 120  # a hang check
    while len(names) < 2 and time.monotonic() < deadline:  # both replicas answer, the new one included
        pair = [started(endpoint, body(40 + i, 24)) for i in range(2)]
        for s in pair:
            s.join(60)
            assert (s.status, s.error) == (200, None)
            assert np.array_equal(s.audio(), expected(single, 40 + pair.index(s), 24))
            names.add(s.replica)
    assert len(names) == 2 and doomed.replica not in names

    def whole_again() -> bool:
        view = httpx.get(endpoint + "/health", timeout=30).json()
        return view["status"] == "ok" and {r["actor"] for r in view["replicas"] if r["state"] == "up"} == names

    wait_for(whole_again, 30, "/health to list the replacement")


def test_serve_replicas_prints_its_own_lines_only(tmp_path):
    """`python -m v2 serve --replicas 1` as users start it, on a Ray of its own: up to its URL and the health
    of the deployment, the output holds the server's lines and nothing of Ray's."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    proc = subprocess.Popen([sys.executable, "-m", "v2", "serve", "--card", CARD, "--device", "cpu", "--replicas",
                             "1", "--port", str(port), "--drain-timeout", "1"], cwd=ROOT,
                            env={**env, "PYTHONUNBUFFERED": "1"}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True)
    reader.start()
    try:
        wait_for(lambda: any(line.startswith("v2 serving") for line in lines) or proc.poll() is not None, 240,
                 "the server's URL")
        assert proc.poll() is None, lines
        health = httpx.get(f"http://127.0.0.1:{port}/health", timeout=30)
        wait_for(lambda: len(lines) >= 2 or proc.poll() is not None, 60, "the line after the URL")
        shown = list(lines)
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(120)
        reader.join(10)
    assert shown[0].startswith(f"v2 serving {CARD} on 1 replica at http://127.0.0.1:{port} "), shown
    logs = shown[1].removeprefix("v2: Ray's own logs are in ").split(" (")[0]
    assert shown[1].startswith("v2: Ray's own logs are in ") and Path(logs).is_dir(), shown  # and where they went
    assert len(shown) == 2, shown  # no banner, no forwarded actor lines, no Serve messages
    assert health.status_code == 200 and health.json()["replicas_target"] == 1, health.text
    assert code == 0, lines
