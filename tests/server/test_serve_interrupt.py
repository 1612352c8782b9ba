"""Ctrl-C on `python -m v2 serve` as users press it: the first says that v2 drains, how many requests are in
flight and for how long (`--drain-timeout`); a second, with a stream in flight, stops at once with one line
and exit 0, no traceback; a stream cut at the drain deadline leaves no traceback either.

A stream stays in flight because its client reads nothing past the headers (a 4 KiB receive buffer, 600
frames of 48 kHz PCM: 4.6 MB that cannot all be sent). Every step waits for what the server says (its URL
on stdout, the response headers, its lines on stderr), never for a fixed time."""

from __future__ import annotations

import json
import os
import queue
import re
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import Iterator

import pytest

from serverkit import TEXT

ROOT = Path(__file__).resolve().parents[2]
WAIT_S = 120  # a bound for a loaded machine, never reached when things work


class Serve:
    """`python -m v2 serve` on a free loopback port; its stderr read line by line on a thread."""

    def __init__(self, drain_s: float) -> None:
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "v2", "serve", "--port", "0", "--drain-timeout", str(drain_s),
             "--no-access-log"], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.seen: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()
        banner = self.proc.stdout.readline()  # printed once the server accepts
        match = re.search(r"at http://127\.0\.0\.1:(\d+) ", banner)
        assert match, (banner, self.rest())
        self.port = int(match.group(1))

    def _read(self) -> None:
        for line in self.proc.stderr:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def until(self, pattern: str) -> str:
        """The first stderr line (from here on) that matches `pattern`."""
        while True:
            try:
                line = self.lines.get(timeout=WAIT_S)
            except queue.Empty:
                raise AssertionError(f"no line matching {pattern!r} in {WAIT_S} s: {self.seen}") from None
            if line is None:
                raise AssertionError(f"exited without a line matching {pattern!r}: {self.seen}")
            self.seen.append(line)
            if re.search(pattern, line):
                return line

    def rest(self) -> list[str]:
        """Every stderr line, once the process has ended."""
        while (line := self.lines.get(timeout=WAIT_S)) is not None:
            self.seen.append(line)
        return self.seen

    def interrupt(self) -> None:
        self.proc.send_signal(signal.SIGINT)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def serve(request: pytest.FixtureRequest) -> Iterator[Serve]:
    server = Serve(request.param)
    try:
        yield server
    finally:
        server.close()


def held_stream(port: int) -> socket.socket:
    """A speech stream whose response has begun and whose client then reads nothing: it stays in flight."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # before connecting: the window stays small
    sock.settimeout(WAIT_S)
    sock.connect(("127.0.0.1", port))
    body = json.dumps({"input": TEXT, "max_frames": 600, "min_frames": 600, "response_format": "pcm",
                       "sample_rate": 48000}).encode()
    sock.sendall(b"POST /v1/audio/speech HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                 b"Content-Length: %d\r\n\r\n" % len(body) + body)
    head = b""
    while b"\r\n\r\n" not in head:
        piece = sock.recv(1024)
        assert piece, head
        head += piece
    assert head.startswith(b"HTTP/1.1 200"), head
    return sock


def no_traceback(lines: list[str]) -> None:
    text = "\n".join(lines)
    for word in ("Traceback", "CancelledError", "Exception in ASGI application", "Waiting for connections"):
        assert word not in text, text


@pytest.mark.parametrize("serve", [300.0], indirect=True)
def test_first_ctrl_c_says_it_drains_and_a_second_stops_at_once_with_one_line(serve: Serve) -> None:
    sock = held_stream(serve.port)
    try:
        serve.interrupt()
        line = serve.until(r"^v2 draining")
        assert line == ("v2 draining: 1 request in flight, for up to 300 s (--drain-timeout); "
                        "Ctrl-C again stops now"), line
        serve.interrupt()
        assert serve.until(r"^v2 stopping now") == "v2 stopping now: cancelled 1 request in flight"
        rc = serve.proc.wait(WAIT_S)  # far within the 300 s drain: the second Ctrl-C did not wait for it
    finally:
        sock.close()
    lines = serve.rest()
    assert rc == 0, lines
    no_traceback(lines)


@pytest.mark.parametrize("serve", [0.5], indirect=True)
def test_a_stream_cut_at_the_drain_deadline_leaves_no_traceback(serve: Serve) -> None:
    sock = held_stream(serve.port)
    try:
        serve.interrupt()
        assert "1 request in flight, for up to 0.5 s (--drain-timeout)" in serve.until(r"^v2 draining")
        rc = serve.proc.wait(WAIT_S)
    finally:
        sock.close()
    lines = serve.rest()
    assert rc == 0, lines
    assert any("Cancel 1 running task" in line for line in lines), lines  # uvicorn's one line for the deadline
    no_traceback(lines)


@pytest.mark.parametrize("serve", [30.0], indirect=True)
def test_ctrl_c_with_nothing_in_flight_says_so(serve: Serve) -> None:
    serve.interrupt()
    assert serve.until(r"^v2 ") == "v2 stopping: no requests in flight"
    assert serve.proc.wait(WAIT_S) == 0
    no_traceback(serve.rest())
