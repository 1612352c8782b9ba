"""`python -m v2 serve` as users run it: prints its URL, and on SIGTERM stops accepting, lets a request in
flight finish, aborts one that outlives the drain deadline, and exits 0.

Nothing here waits a fixed time or bounds a duration from above: the refusal is checked once the server says it
is shutting down, and every wait is a hang check (BOUND). The drain deadline (DRAIN_S) holds the short request's
20 frames at up to 300 ms a frame (~15 times this CPU's pace under load), while the long one's 60,000 frames (the
card copied with its frame cap raised) outlast it unless a frame takes under 0.1 ms (~50 times as fast as this
CPU: a 600-frame request, the shipped card's cap, came to finish inside the deadline once the frame step got
faster)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx

from serverkit import TEXT

ROOT = Path(__file__).resolve().parents[2]
DRAIN_S = 6.0  # the short request's 20 frames fit well within it; the long one's do not
SHORT_FRAMES = 20
LONG_FRAMES = 60_000  # 80 minutes of audio: no CPU makes it within the drain deadline (the card is raised to it)
BOUND = 120.0  # seconds: a hang check
# the listening socket is closed: refused, or reset while the connection waited in its backlog, or cut
CLOSED = (httpx.NetworkError, httpx.RemoteProtocolError)


def _stream(url: str, body: dict, out: dict, started: threading.Event) -> None:
    received = 0
    try:
        with httpx.stream("POST", url + "/v1/audio/speech", json=body, timeout=BOUND) as r:
            out["status"] = r.status_code
            for piece in r.iter_bytes():
                received += len(piece)
                started.set()
        out["complete"] = True
    except httpx.HTTPError as e:  # a cut stream: the body ended without its closing chunk
        out["error"] = type(e).__name__
    finally:
        out["bytes"] = received
        started.set()


def _wait_until_shutting_down(url: str) -> None:
    """Return once the server refuses new requests (its gate's 503, or the listening socket closed)."""
    deadline = time.monotonic() + BOUND
    while time.monotonic() < deadline:
        try:
            r = httpx.get(url + "/health", timeout=BOUND)
        except CLOSED:
            return
        if r.status_code == 503 and "shutting_down" in r.text:
            return
        time.sleep(0.05)
    raise AssertionError(f"the server still accepted requests {BOUND} s after SIGTERM")


def test_sigterm_drains_then_aborts_the_rest_and_exits_0(tmp_path):
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    card = (ROOT / "cards" / "moss_tts_local_tiny.toml").read_text()
    assert "max_frames = 600 " in card
    (tmp_path / "long.toml").write_text(card.replace("max_frames = 600 ", f"max_frames = {LONG_FRAMES} "))
    proc = subprocess.Popen([sys.executable, "-m", "v2", "serve", "--port", "0", "--drain-timeout", str(DRAIN_S),
                             "--card", str(tmp_path / "long.toml"),
                             "--no-access-log", "--log-level", "warning"], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()  # the server prints its URL once it accepts
        match = re.search(r"at (http://127\.0\.0\.1:\d+) ", line)
        assert match, (line, proc.stderr.read() if proc.poll() is not None else "")
        url = match.group(1)
        short = {"input": TEXT, "max_frames": SHORT_FRAMES, "min_frames": SHORT_FRAMES, "response_format": "pcm",
                 "sample_rate": 48000}
        long = {**short, "max_frames": LONG_FRAMES, "min_frames": LONG_FRAMES}
        results: dict[str, dict] = {"short": {}, "long": {}}
        flowing = {k: threading.Event() for k in results}
        threads = [threading.Thread(target=_stream, args=(url, body, results[k], flowing[k]))
                   for k, body in (("short", short), ("long", long))]
        for t in threads:
            t.start()
        for event in flowing.values():
            assert event.wait(BOUND)
        proc.send_signal(signal.SIGTERM)
        sent = time.perf_counter()
        _wait_until_shutting_down(url)
        try:  # no longer accepting: the socket is closed, or a request that still got in is told 503
            refused = httpx.post(url + "/v1/audio/speech", json=short, timeout=BOUND).status_code == 503
        except CLOSED:
            refused = True
        assert refused
        for t in threads:
            t.join(BOUND)
        rc = proc.wait(BOUND)
        elapsed = time.perf_counter() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert rc == 0, proc.stderr.read()[-2000:]
    assert results["short"].get("complete") and results["short"]["bytes"] == SHORT_FRAMES * 3840 * 2  # drained
    assert not results["long"].get("complete") and results["long"]["bytes"] < LONG_FRAMES * 3840 * 2  # aborted
    assert elapsed > DRAIN_S - 0.5  # the long request was given the whole drain deadline
