"""A long text through `v2 synth` as users run it: on a terminal a bar of segments ended of planned with an
estimate of the time left (none off a terminal); Ctrl-C keeps the audio made so far as a valid file, says so
(`interrupted: wrote N s of audio to PATH`), with or without `--stream`, and exits 130.

The command runs as a subprocess on the default (tiny) card with its stderr on a pseudo-terminal, so the bar
is drawn as a user sees it; SIGINT is sent once the bar shows a segment ended (audio has been made), never
after a fixed time."""

from __future__ import annotations

import os
import pty
import re
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import soundfile as sf

from v2.progress import Progress, _duration

ROOT = Path(__file__).resolve().parents[2]
WAIT_S = 180  # a bound for a loaded machine, never reached when things work
SENTENCE = "Sentence number {} tells of the quiet river that runs past old stone houses."


def long_text(tmp_path: Path, sentences: int) -> Path:
    """About 78 characters a sentence: 30 are spoken as several segments of the tiny card's 300 characters."""
    path = tmp_path / "long.txt"
    path.write_text(" ".join(SENTENCE.format(i) for i in range(sentences)))
    return path


def _default_sigint() -> None:  # as from a terminal: a background job's ignored SIGINT would stop Python's handler
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def synth_interrupted(args: list[str]) -> tuple[int, str]:
    """Run `v2 synth ARGS` with stderr on a pseudo-terminal, SIGINT it once a segment has ended; its exit status
    and everything it wrote on the terminal."""
    master, slave = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "v2", "synth", *args], cwd=ROOT, stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=slave, preexec_fn=_default_sigint)
    os.close(slave)
    seen, sent = b"", False
    deadline = time.monotonic() + WAIT_S
    try:
        while True:
            ready, _, _ = select.select([master], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                pytest.fail(f"no end within {WAIT_S} s; the terminal showed: {seen.decode()[-2000:]!r}")
            try:
                piece = os.read(master, 4096)
            except OSError:  # the terminal closed: the process has ended
                break
            if not piece:
                break
            seen += piece
            if not sent and re.search(rb"\] [1-9]\d*/\d+ segments", seen):
                proc.send_signal(signal.SIGINT)
                sent = True
        rc = proc.wait(WAIT_S)
    finally:
        os.close(master)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert sent, seen.decode()[-2000:]
    return rc, seen.decode()


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_ctrl_c_keeps_the_audio_made_so_far_and_says_so(tmp_path: Path, stream: bool) -> None:
    out = tmp_path / "long.wav"
    rc, terminal = synth_interrupted(["--text-file", str(long_text(tmp_path, 30)), "-o", str(out),
                                      *(["--stream"] if stream else [])])
    assert re.search(r"\[#+\.+\] 1/\d+ segments, [\d.]+ s of audio, \d+ s, about \d+ (s|min \d\d s) left",
                     terminal), terminal
    said = re.search(r"interrupted: wrote ([\d.]+) s of audio to (\S+)\r?\n", terminal)
    assert said, terminal[-2000:]
    assert rc == 130, terminal[-2000:]  # a Ctrl-C'd program's status
    assert "error" not in terminal and "Traceback" not in terminal, terminal[-2000:]
    assert Path(said.group(2)) == out
    info = sf.info(str(out))  # a valid file, whole: its header says how long it is
    assert info.frames > 0
    assert info.duration == pytest.approx(float(said.group(1)), abs=0.01)


def test_off_a_terminal_there_is_no_bar(tmp_path: Path) -> None:
    out = tmp_path / "two.wav"
    proc = subprocess.run([sys.executable, "-m", "v2", "synth", "--text-file", str(long_text(tmp_path, 5)),
                           "-o", str(out), "--max-frames", "8"], cwd=ROOT, capture_output=True, text=True,
                          timeout=WAIT_S)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "\r" not in proc.stderr and "segments" not in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr  # the final line alone
    assert sf.info(str(out)).frames > 0


class _Terminal:
    """A stand-in stderr that says it is a terminal and keeps what was written."""

    def __init__(self) -> None:
        self.text = ""

    def isatty(self) -> bool:
        return True

    def write(self, text: str) -> None:
        self.text += text

    def flush(self) -> None:
        pass


def test_the_bar_and_the_estimate(monkeypatch: pytest.MonkeyPatch) -> None:
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    progress = Progress()
    progress.begun = time.perf_counter() - 100  # 100 s in
    progress.update(10, 0.8, (0, 4))
    assert terminal.text.endswith("[....................] 0/4 segments, 0.8 s of audio, 100 s, estimating the "
                                  "time left")
    progress.update(10, 0.8, (1, 4))  # 100 s a segment, 3 to go
    assert re.search(r"\[#####\.{15}\] 1/4 segments, 1\.6 s of audio, 10\d s, about 5 min 0\d s left *$",
                     terminal.text), terminal.text
    progress.update(10, 0.8)  # one prompt: no bar
    assert terminal.text.split("\r")[-1].startswith("30 frames, 2.40 s of audio")
    progress.clear()
    assert terminal.text.endswith("\r")
    assert (_duration(45), _duration(185), _duration(3725)) == ("45 s", "3 min 05 s", "1 h 02 min")


@pytest.mark.parametrize("name", ["moss_tts_local_tiny", "qwen3_tts_tiny"])
def test_the_handle_reports_segments_ended_of_planned(name: str) -> None:
    """What the bar draws: `SpeechHandle.segments` from (0, planned) at admission to (planned - 1, planned) at the
    last segment, never backwards; planned is the segments the result has; one prompt stays (0, 1)."""
    from v2.runtime import Runtime

    with Runtime.from_card(name, device="cpu") as rt:
        text = " ".join(SENTENCE.format(i) for i in range(12))  # over the cards' 300 characters a segment
        handle = rt.submit({"text": text, "max_frames": 3, "seed": 1})
        seen = [handle.segments]
        for _ in handle:
            seen.append(handle.segments)
        result = handle.result()
        planned = len(result.segments)
        assert planned > 2 and result.finish_reason in ("stop", "length")
        assert {total for _, total in seen[1:]} == {planned}, seen
        ended = [done for done, _ in seen]
        assert ended == sorted(ended) and ended[-1] == planned - 1, seen
        short = rt.submit({"text": "Hello there.", "max_frames": 3, "seed": 1})
        short.result()
        assert short.segments == (0, 1)
