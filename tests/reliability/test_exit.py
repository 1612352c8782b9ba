"""The process ends as Python says it ends: a script that raises, calls sys.exit, is interrupted in
`result()`, deletes its runtime or falls off its end while requests still run exits with Python's own
status, promptly, without "terminate called" (SIGABRT) from threads stopped inside torch."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BOUND = 120.0  # seconds: a hang check (the child normally ends within a second of its last line)

# Four requests of the card's 600 frames are still decoding when the script ends: each frame sleeps 10 ms in the
# loop, so they take >= 6 s however fast the host is (the script ends, or is signalled, within moments of its line).
PRELUDE = """
import sys, time
from v2.runtime import Runtime

rt = Runtime.from_card("moss_tts_local_tiny", device="cpu")
_advance = rt.family.ar_loop.advance


def _slowed(state, plan, row):
    time.sleep(0.01)
    return _advance(state, plan, row)


rt.family.ar_loop.advance = _slowed
handles = [rt.submit({"text": "a long request", "max_frames": 600, "min_frames": 600, "stream": i % 2 == 0})
           for i in range(4)]
handles[0].subscribe(lambda chunk: None)
while rt.stats()["steps"] < 5:
    time.sleep(0.01)
print("running", rt.stats()["running"], flush=True)
"""

SCENARIOS = {
    "raise": ("raise ValueError('boom')", 1),
    "sys.exit(3)": ("sys.exit(3)", 3),
    "del rt": ("del rt", 0),
    "end of script": ("pass", 0),
    "raise in a with block": ("with rt:\n    raise ValueError('boom')", 1),
}


def _script(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "script.py"
    path.write_text(textwrap.dedent(PRELUDE) + body + "\n")
    return path


# A script starts as from a terminal, with SIGINT's default action: a shell starts a background job with SIGINT
# ignored, Python then installs no KeyboardInterrupt handler, and a test run so (`pytest ... &`) would wait on a
# child that cannot be interrupted. Exec keeps a default action, so the script's Python installs its handler.
AS_FROM_A_TERMINAL = ("import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
                      "os.execv(sys.executable, [sys.executable, *sys.argv[1:]])")


def _start(args: list[str]) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen([sys.executable, "-c", AS_FROM_A_TERMINAL, *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)


def _end(proc: subprocess.Popen[str]) -> tuple[int, str, str]:
    try:
        out, err = proc.communicate(timeout=BOUND)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"the process did not end within {BOUND} s (a hang); stderr:\n{err[-2000:]}")
    return proc.returncode, out, err


def _check_clean(out: str, err: str) -> None:
    assert "terminate called" not in err, err[-2000:]
    running = [line for line in out.splitlines() if line.startswith("running")]
    assert running and int(running[0].split()[1]) > 0, f"requests were not running at exit: {out!r}"


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_a_script_exits_with_pythons_status_while_requests_run(tmp_path, name):
    body, status = SCENARIOS[name]
    code, out, err = _end(_start([str(_script(tmp_path, body))]))
    _check_clean(out, err)
    assert code == status, f"exit status {code}, Python's is {status}; stderr:\n{err[-2000:]}"
    if status == 1:
        assert "ValueError: boom" in err


# Readiness is a handshake, never a sleep: a script prints "waiting" only once its main thread is inside the wait
# that the SIGINT must interrupt, and that wait notices a signal whenever it lands (even one that lands between
# the last check for signals and the blocking call), so the signal can neither come early nor be lost.
CONTROL = """
import time
print('waiting', flush=True)
while True:  # short sleeps: a SIGINT that lands anywhere in the loop is raised by the next one at the latest
    time.sleep(0.05)
"""

# A daemon thread prints "waiting" once the main thread's stack holds `SpeechHandle.result` (the request has
# ~595 frames to go then: >= 5 s on any host). A signal that lands before the blocking call inside it is
# raised at the handle's next notify (its end at the latest), still inside `result()`.
IN_RESULT = """
import threading

def _announce(main=threading.main_thread().ident):
    while True:
        frame = sys._current_frames().get(main)
        while frame is not None and not (frame.f_code.co_name == "result" and
                                         frame.f_code.co_filename.endswith("handles.py")):
            frame = frame.f_back
        if frame is not None:
            print("waiting", flush=True)
            return
        time.sleep(0.001)

threading.Thread(target=_announce, daemon=True).start()
handles[1].result()
"""


def _interrupted(args: list[str]) -> tuple[int, str, str]:
    """Start the script, wait for its "waiting" line, send SIGINT, and return how it ended."""
    proc = _start(args)
    assert proc.stdout is not None
    lines = []
    while (line := proc.stdout.readline()) and not line.startswith("waiting"):
        lines.append(line)
    if line:
        proc.send_signal(signal.SIGINT)
    code, out, err = _end(proc)
    assert line, f"the script ended (status {code}) before it was waiting; stderr:\n{err[-2000:]}"
    return code, "".join(lines) + out, err


def test_ctrl_c_while_waiting_in_result_exits_as_python_does(tmp_path):
    plain = tmp_path / "plain.py"
    plain.write_text(textwrap.dedent(CONTROL))
    python_code, _, python_err = _interrupted([str(plain)])  # what Python does on an uncaught KeyboardInterrupt
    assert "KeyboardInterrupt" in python_err
    if os.name == "posix":  # Python >= 3.8 ends by re-raising SIGINT with its default action
        assert python_code == -signal.SIGINT, python_err[-2000:]

    code, out, err = _interrupted([str(_script(tmp_path, textwrap.dedent(IN_RESULT)))])
    _check_clean(out, err)
    assert "KeyboardInterrupt" in err
    assert ", in result" in err, f"not interrupted inside result(); stderr:\n{err[-2000:]}"
    assert code == python_code, f"exit status {code}, Python's is {python_code}; stderr:\n{err[-2000:]}"
