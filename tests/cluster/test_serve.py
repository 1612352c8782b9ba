"""Serving replicas on Ray Serve: two runtime replicas behind one HTTP endpoint, least-loaded, streaming the
runtime's own audio; a replica killed mid-stream fails only its own request, and Serve brings it back."""

from __future__ import annotations

import socket
import threading
import time

import pytest

ray = pytest.importorskip("ray", reason="the cluster tests need Ray: pip install v2[ray]")
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")  # Ray Serve's own pydantic fields

import httpx  # noqa: E402
import numpy as np  # noqa: E402

from .kit import CARD, wait_for  # noqa: E402
from v2.runtime import Runtime  # noqa: E402
from v2.server import ServerConfig  # noqa: E402
from v2.server.audio import to_s16  # noqa: E402

TEXT = "The quiet river runs past old stone houses."


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def endpoint(ray_cluster):
    from ray import serve

    from v2.cluster.serve import deployment, start

    app = deployment(CARD, replicas=2, runtime_options={"device": "cpu"}, config=ServerConfig.for_card(CARD),
                     resources={"num_cpus": 0.5}, drain_timeout=1.0)
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
    a = started(endpoint, body(21, 60))
    b = started(endpoint, body(22, 12))  # a is in flight on one replica: the other one takes b
    a.join(120)
    b.join(120)
    assert (a.status, b.status, a.error, b.error) == (200, 200, None, None)
    assert a.replica and b.replica and a.replica != b.replica
    assert np.array_equal(a.audio(), expected(single, 21, 60))
    assert np.array_equal(b.audio(), expected(single, 22, 12))
    health = httpx.get(endpoint + "/health", timeout=30)
    assert health.status_code == 200


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

    def two_running() -> bool:
        status = serve.status().applications["v2"].deployments["speech"]
        return status.replica_states.get("RUNNING", 0) == 2

    wait_for(two_running, 60, "Serve to replace the killed replica")
    names = set()
    deadline = time.monotonic() + 30
    while len(names) < 2 and time.monotonic() < deadline:  # both replicas answer, the new one included
        pair = [started(endpoint, body(40 + i, 24)) for i in range(2)]
        for s in pair:
            s.join(60)
            assert (s.status, s.error) == (200, None)
            assert np.array_equal(s.audio(), expected(single, 40 + pair.index(s), 24))
            names.add(s.replica)
    assert len(names) == 2 and doomed.replica not in names
