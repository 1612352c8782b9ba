"""`Runtime.close()` ends every thread the runtime started before it returns, so nothing of the runtime's is
left running inside torch when the interpreter finalizes (a daemon thread stopped inside a torch operation
ends the process with "terminate called without an active exception", SIGABRT): on an asynchronous device
(`SimulatedStream`: a worker thread that runs the launched work) the worker, with the work still queued at
close (state changes queued after the last read, e.g. while running requests are aborted); a subscriber's
own thread, with its callback still running."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from types import FrameType

from v2.runtime import Runtime
from v2.runtime.device import SimulatedStream

ROOT = Path(__file__).resolve().parents[2]
BOUND = 120.0  # seconds: a hang check only


def _inside(frame: FrameType | None, function: str, module: str) -> bool:
    """Whether a thread's stack (its top `frame`) is inside `function` of the file `module`."""
    while frame is not None:
        if frame.f_code.co_name == function and frame.f_code.co_filename.endswith(module):
            return True
        frame = frame.f_back
    return False


def _closing_stream(frame: FrameType | None) -> bool:
    """Whether a thread's stack is inside `SimulatedStream.close` (the engine thread waiting for the worker)."""
    return _inside(frame, "close", "device.py")


def test_close_waits_for_the_work_still_on_the_device_and_ends_every_thread():
    rt = Runtime.from_card("moss_tts_local_tiny", device="cpu", stream=SimulatedStream(0.0))
    rt.submit({"text": "hi", "max_frames": 4}).result(BOUND)
    stream = rt.engine.stream
    assert isinstance(stream, SimulatedStream)
    release, ran = threading.Event(), []

    def held() -> None:  # work on the device when the runtime closes
        release.wait(BOUND)
        ran.append(True)

    stream.launch(held)
    closer = threading.Thread(target=rt.close)
    closer.start()
    # no timing: watch until the engine thread either ended (the worker left running) or waits for the worker
    engine = rt.engine.thread
    deadline = time.monotonic() + BOUND
    while engine.is_alive() and not _closing_stream(sys._current_frames().get(engine.ident or -1)):
        assert time.monotonic() < deadline, "the engine thread neither ended nor closed its stream"
        time.sleep(0.001)
    left_running = not engine.is_alive() and not ran
    release.set()
    closer.join(BOUND)
    assert not left_running, "the engine ended while work it launched was still running on the device's worker"
    assert not closer.is_alive() and ran == [True]
    started = [engine, stream._worker, rt.engine.results._thread, rt.engine.callbacks._thread]
    assert [t.name for t in started if t.is_alive()] == []


# The script's last act closes a runtime whose device worker is still inside torch (queued matrix products that
# take far longer than the interpreter's exit); the second ends while requests run (closed by the exit hook).
QUEUED = """
import torch
from v2.runtime import Runtime
from v2.runtime.device import SimulatedStream

rt = Runtime.from_card("moss_tts_local_tiny", device="cpu", stream=SimulatedStream(0.0))
rt.submit({"text": "hi", "max_frames": 4}).result(120)
a = torch.randn(512, 512)
rt.engine.stream.launch(lambda: [a @ a for _ in range(40)] and None)
rt.close()
print("closed", flush=True)
"""

RUNNING = """
import time
from v2.runtime import Runtime
from v2.runtime.device import SimulatedStream

rt = Runtime.from_card("moss_tts_local_tiny", device="cpu", stream=SimulatedStream(0.0))
handles = [rt.submit({"text": f"a long request {i}", "max_frames": 600, "min_frames": 600, "stream": i % 2 == 0})
           for i in range(4)]
while rt.stats()["steps"] < 5:
    time.sleep(0.001)
late = rt.submit({"text": "late", "max_frames": 600})
print("closed", flush=True)
"""


def _run(tmp_path: Path, body: str) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "script.py"
    path.write_text(textwrap.dedent(body))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, str(path)], capture_output=True, text=True, env=env, cwd=ROOT,
                          timeout=BOUND)


def test_a_script_exits_cleanly_with_work_on_the_device_at_close(tmp_path):
    for body in (QUEUED, RUNNING, QUEUED, RUNNING):
        done = _run(tmp_path, body)
        assert "terminate called" not in done.stderr, done.stderr[-2000:]
        assert done.returncode == 0 and "closed" in done.stdout, done.stderr[-2000:]


def _joining_a_lane(frame: FrameType | None) -> bool:
    """Whether a thread's stack is inside `Dispatcher.join` (dispatch.py)."""
    return _inside(frame, "join", "dispatch.py")


def test_close_waits_for_a_subscribers_thread():
    """A subscriber's callback (its own thread) still running when the runtime closes is waited for, as the
    done callbacks' thread is: user code there may be inside torch too."""
    rt = Runtime.from_card("moss_tts_local_tiny", device="cpu")
    before = set(threading.enumerate())
    release, calls = threading.Event(), []

    def slow(chunk: object) -> None:
        calls.append(chunk)
        release.wait(BOUND)

    handle = rt.submit({"text": "hi", "max_frames": 8, "stream": True})
    handle.subscribe(slow)
    handle.result(BOUND)
    lanes = [t for t in threading.enumerate() if t not in before and t.name == "v2-subscriber"]
    assert lanes, "the subscriber has no thread of its own"
    closer = threading.Thread(target=rt.close)
    closer.start()
    # no timing: watch until close() returned or waits in a join after the runtime's own threads ended
    own = [rt.engine.thread, rt.engine.results._thread, rt.engine.callbacks._thread]
    deadline = time.monotonic() + BOUND
    while closer.is_alive() and not (not any(t.is_alive() for t in own)
                                     and _joining_a_lane(sys._current_frames().get(closer.ident or -1))):
        assert time.monotonic() < deadline, "close() neither returned nor waited for the subscriber"
        time.sleep(0.001)
    returned_early = not closer.is_alive() and any(t.is_alive() for t in lanes)
    release.set()
    closer.join(BOUND)
    assert not returned_early, "close() returned while a subscriber's callback still ran"
    assert not closer.is_alive() and calls
    assert [t.name for t in lanes if t.is_alive()] == []
