"""The command line's progress line on stderr: the model loading, then frames and seconds of audio so far.

Owns: what the line says and when it is written. On a terminal one status line is rewritten in place
(loading, then the count of frames and seconds of audio, then the result), and a failure or an interruption
clears it so that the error is the one line left. Elsewhere (a log, a pipe) only the final line is written.
There is no bar against a frame budget: a request ends when the model stops, so the count runs up to the
real end. A long text spoken as several segments has a bar of segments ended of planned, with an estimate of
the time left (the time per ended segment so far, times the segments to go).
Must not know: the runtime, requests, audio formats.
"""

from __future__ import annotations

import sys
import time

BAR = 20  # characters of the segments bar
from types import TracebackType


class Progress:
    def __init__(self, enabled: bool = True) -> None:
        self.enabled = enabled
        self.out = sys.stderr
        self.live = enabled and self.out.isatty()
        self.frames, self.seconds = 0, 0.0
        self.start = self.begun = time.perf_counter()
        self._open = 0  # characters of the status line now on the terminal

    def _status(self, text: str) -> None:
        if self.live:
            self.out.write("\r" + text.ljust(self._open))
            self.out.flush()
            self._open = len(text)

    def loading(self, card: str, device: str) -> None:
        self._status(f"loading {card} on {device} ...")

    def started(self) -> None:
        """The model is loaded and the request submitted: time from here."""
        self.begun = time.perf_counter()
        self._status(f"loaded in {self.begun - self.start:.1f} s; generating ...")

    def update(self, frames: int, seconds: float, segments: tuple[int, int] = (0, 1)) -> None:
        """A chunk of `frames` frames (`seconds` of audio); `segments`: (ended, planned) of a long text."""
        self.frames += frames
        self.seconds += seconds
        elapsed = time.perf_counter() - self.begun
        done, total = segments
        if total <= 1:
            self._status(f"{self.frames} frames, {self.seconds:.2f} s of audio, {elapsed:.1f} s")
            return
        filled = BAR * done // total
        left = f"about {_duration(elapsed / done * (total - done))} left" if done else "estimating the time left"
        self._status(f"[{'#' * filled}{'.' * (BAR - filled)}] {done}/{total} segments, {self.seconds:.1f} s of "
                     f"audio, {elapsed:.0f} s, {left}")

    def done(self, frames: int, seconds: float, finish_reason: str, note: str | None = None) -> None:
        """The final line, from the result (the real end); `note`: what the listener should know first."""
        if not self.enabled:
            return
        text = (f"{frames} frames, {seconds:.2f} s of audio in {time.perf_counter() - self.begun:.1f} s "
                f"({finish_reason})") + (f"; {note}" if note else "")
        self.out.write(("\r" + text.ljust(self._open) if self.live else text) + "\n")
        self.out.flush()
        self._open = 0

    def __enter__(self) -> "Progress":
        return self

    def clear(self) -> None:
        """Take the status line off the terminal (for the message that follows)."""
        if self._open:
            self.out.write("\r" + " " * self._open + "\r")
            self.out.flush()
            self._open = 0

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.clear()  # a failure while the status line shows: cleared for the error message


def _duration(seconds: float) -> str:
    """`45 s`, `3 min 05 s`, `1 h 02 min`: a time left as a person reads it."""
    s = max(0, round(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"
